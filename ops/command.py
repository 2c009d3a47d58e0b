"""What every operator command shares: settings, logging to stderr, the database for the
length of the command, and the commands' own failures (reported, with every process's, by
server/process/exits.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pwd
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable

from server.db.lifecycle import open_database
from server.db.pool import Database
from server.routers.mac import InvalidMac, normalise_mac
from server.db import service_settings
from server.process.exits import reported
from server.settings import Settings, load_settings, unrecognised_settings, with_service_settings
from server.tuning.changes import BadInput, TuningRefused


class CommandError(Exception):
    """A failure the command reports as one clear line (exit status 1)."""


class UsageError(CommandError):
    """A bad argument, found once the command runs: one line, exit status 2, as argparse's."""


# The commands' own failures, beside those every process names (server/process/exits.py).
USAGE = (UsageError, InvalidMac, BadInput)
FAILED = (CommandError, TuningRefused)


def mac_argument(text: str) -> str:
    """A MAC address given on the command line, normalised; UsageError when it is none."""
    try:
        return normalise_mac(text)
    except InvalidMac as error:
        raise UsageError(str(error)) from None


def moment(text: str) -> datetime:
    """A time given on the command line (ISO 8601; UTC when it names no zone)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a time such as 2026-11-25T14:30:00Z, "
                                         f"got {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def operator() -> str:
    """Who made a change from a shell, as the record of changes (`tuning_changes`) names it."""
    try:  # by uid: getpass.getuser() takes LOGNAME or USER, which anybody sets
        return f"shell:{pwd.getpwuid(os.getuid()).pw_name}"
    except KeyError:  # no login name for this uid (a container)
        return f"shell:uid {os.getuid()}"


async def acting_settings(prog: str, settings: Settings, db: Database) -> Settings:
    """The command's settings acting with the running service's (recorded at its start:
    server/db/service_settings.py) where it gave none of its own; one line on stderr names
    those it gave otherwise, as they change what the command does."""
    service = await service_settings.recorded(db)
    if not service:
        return settings
    acting, differing = with_service_settings(settings, service)
    if differing:
        print(f"{prog}: warning: acting with {', '.join(differing)}, not as the running "
              "service does; unset these to act with the service's settings", file=sys.stderr)
    return acting


def run_command(prog: str, body: Callable[[Settings, Database], Awaitable[int]],
                log_level: int = logging.WARNING, settings: Settings | None = None) -> int:
    """`body` with the settings (loaded here when not given) and the database, its failures
    reported as server/process/exits.py reports every process's."""
    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def main(settings: Settings) -> int:
        async with open_database(settings) as db:
            return await body(await acting_settings(prog, settings, db), db)

    def command() -> int:
        return asyncio.run(main(settings if settings is not None else
                                _loaded_settings(prog)))
    return reported(prog, command, usage=USAGE, failed=FAILED, marker="error: ")


def _loaded_settings(prog: str) -> Settings:
    loaded = load_settings()
    for warning in unrecognised_settings():
        print(f"{prog}: warning: {warning}", file=sys.stderr)
    return loaded


def scope_arguments(parser: argparse.ArgumentParser, kept_with: str) -> None:
    """`--mac` and `--note` of a tuning change (an allowlist entry, a rule override)."""
    parser.add_argument("--mac", help="for this router only (default: the whole fleet)")
    parser.add_argument("--note", help=f"free text kept with the {kept_with}")


def entries_arguments(actions, listing: str, entry: str, list_act: Callable,
                      remove_act: Callable) -> None:
    """The `LISTING` and `remove ID` sub-commands of the tuning entries kept (an allowlist
    entry, a rule override)."""
    actions.add_parser(listing, help=f"every {entry}").set_defaults(act=list_act)
    remove = actions.add_parser("remove", help=f"remove an {entry} by the id `{listing}` shows")
    remove.add_argument("id", type=int)
    remove.set_defaults(act=remove_act)


def sub_command(prog: str) -> Callable[[Settings, argparse.Namespace], int]:
    """What runs a command of sub-commands: the one chosen, whose parser named its function
    (`set_defaults(act=...)`, called with the arguments, the settings and the database)."""
    def run(settings: Settings, args: argparse.Namespace) -> int:
        return run_command(prog, lambda settings, db: args.act(args, settings, db),
                           settings=settings)
    return run


@dataclass(frozen=True)
class Command:
    """One `router-backend` command: its name and one-line help, what registers its
    arguments, and what runs it (ops/cli.py holds the table of them)."""
    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Settings, argparse.Namespace], int]


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command of no arguments of its own."""
