"""The `router-backend` command's entry point: Ctrl-C while the program is still loading its
modules or building its parser ends it with one line, as Ctrl-C later on does (ops/cli.py),
instead of a traceback of whichever import or call was under way."""

import sys


def main() -> int:
    try:
        from ops.cli import main as cli_main
        return cli_main()
    except KeyboardInterrupt:
        print("router-backend: interrupted", file=sys.stderr)
        return 130
