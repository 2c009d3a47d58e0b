"""`router-backend`: run the service (`serve`, the default) and operator utilities. Each
command is a module of ops/ holding its `COMMAND` (its arguments and what runs it); this
module only gathers them, loads the settings and reports a failure as every process does
(server/process/exits.py)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from ops.command import Command
from server import SERVICE_VERSION
from server.logs import configure_logging
from server.process.exits import reported
from server.settings import load_settings, unrecognised_settings

log = logging.getLogger("router_backend.settings")

# Each command's module (holding its COMMAND), in the order `--help` lists them.
COMMAND_MODULES = {name: f"ops.{name}" for name in (
    "serve", "migrate", "retention", "subscriptions", "status", "rules", "allowlist", "fleet",
    "hunt", "intel", "reports", "feedback", "enforcement", "telemetry", "console", "citus",
    "backup", "restore", "dbshell")}
# Commands that pass what they do not know on (to psql).
PASSING_ON = {("dbshell", None), ("telemetry", "sql")}


def commands_for(argv: list[str]) -> tuple[Command, ...]:
    """The commands the parser is built with: the one the arguments name (or `serve`, named
    by none), importing its own module only, which halves a command's start; every one for
    anything else (`--help`, `--version`, a name mistyped)."""
    first = argv[0] if argv else "serve"
    names = [first] if first in COMMAND_MODULES else list(COMMAND_MODULES)
    return tuple(importlib.import_module(COMMAND_MODULES[name]).COMMAND for name in names)


def build_parser(commands: tuple[Command, ...]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="router-backend",
                                     description="Router IDS backend and notification service.")
    parser.add_argument("--version", action="version",
                        version=f"router-backend {SERVICE_VERSION}")
    subparsers = parser.add_subparsers(dest="command")
    for command in commands:
        one = subparsers.add_parser(command.name, help=command.help)
        command.arguments(one)
        one.set_defaults(run=command.run)
        if command.name == "serve":  # the default
            parser.set_defaults(run=command.run)
    return parser


def _run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(commands_for(argv))
    args, extra = parser.parse_known_args(argv)
    if extra and (args.command, getattr(args, "action", None)) not in PASSING_ON:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.psql_args = extra
    settings = load_settings()
    configure_logging(settings.log_config)
    for warning in unrecognised_settings():
        log.warning("%s", warning)
    return args.run(settings, args)


def main(argv: list[str] | None = None) -> int:
    # The parser too: Ctrl-C reached it while it was being built (CI, stop 74).
    return reported("router-backend", lambda: _run(argv))


if __name__ == "__main__":
    sys.exit(main())
