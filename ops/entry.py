"""The `router-backend` command's entry point: Ctrl-C while the program is still loading its
modules or building its parser ends it with one line, as Ctrl-C later on does, instead of a
traceback of whichever import or call was under way (server/process/exits.py, imported
first: it is small)."""

from server.process.exits import reported


def main() -> int:
    def run() -> int:
        from ops.cli import main as cli_main
        return cli_main()
    return reported("router-backend", run)
