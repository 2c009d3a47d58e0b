"""The `router-backend` command's entry point: Ctrl-C while the program is still loading its
modules (the database driver, the settings: seconds on a cold start) ends it with one line,
as Ctrl-C later on does (server/process/exits.py, which ops/cli.py runs every command
through), instead of a traceback of whichever import was under way. Nothing is imported
before the guard is in place."""

import sys


def main() -> int:
    try:
        from ops.cli import main as cli_main
    except KeyboardInterrupt:
        print("router-backend: interrupted", file=sys.stderr)
        return 130
    return cli_main()
