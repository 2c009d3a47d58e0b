"""What every operator command shares: settings, logging to stderr, the database for the
length of the command, and one mapping of failures to messages and exit codes."""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import sys
from typing import Awaitable, Callable

from server.db.lifecycle import open_database
from server.db.migrate import SchemaNotReady
from server.db.pool import Database, DatabaseUnavailable
from server.routers.mac import InvalidMac, normalise_mac
from server.db import service_settings
from server.settings import (Settings, SettingsError, load_settings, unrecognised_settings,
                             with_service_settings)
from server.tuning.changes import BadInput, TuningRefused

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_STDOUT_CLOSED = 141  # as a shell reports a command SIGPIPE ended (128 + 13)


class CommandError(Exception):
    """A failure the command reports as one clear line (exit status 1)."""


class UsageError(CommandError):
    """A bad argument, found once the command runs: one line, exit status 2, as argparse's."""


def stdout_closed() -> int:
    """The reader of standard output left (`| head`): end quietly, as a Unix tool does. What
    is still buffered goes nowhere, so that the interpreter's last flush says nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_STDOUT_CLOSED


def mac_argument(text: str) -> str:
    """A MAC address given on the command line, normalised; UsageError when it is none."""
    try:
        return normalise_mac(text)
    except InvalidMac as error:
        raise UsageError(str(error)) from None


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
    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings is None:
        try:
            settings = load_settings()
        except SettingsError as error:
            print(f"{prog}: {error}", file=sys.stderr)
            return EXIT_USAGE
        for warning in unrecognised_settings():
            print(f"{prog}: warning: {warning}", file=sys.stderr)

    async def main() -> int:
        async with open_database(settings) as db:
            return await body(await acting_settings(prog, settings, db), db)

    try:
        status = asyncio.run(main())
        sys.stdout.flush()  # here, where a closed reader is seen
        return status
    except BrokenPipeError:
        return stdout_closed()
    except (UsageError, InvalidMac, BadInput) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (CommandError, TuningRefused, ConnectionError, DatabaseUnavailable,
            SchemaNotReady) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
