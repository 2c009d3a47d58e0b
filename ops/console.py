"""`router-backend console credential NAME ROLE [--password]`: a console sign-in. Prints a
new random secret (or, with --password, takes one typed twice, at least 16 characters) and
the CONSOLE_USERS entry holding its scrypt hash; only the hash goes into settings. With
CONSOLE_USERS unset until now, CONSOLE_SECRET needs setting too: one is printed to use.

`router-backend console sessions [end NAME]`: who is signed in, since when, from where; or
end every session of NAME at once (in every process: sessions live in the database)."""

from __future__ import annotations

import argparse
import functools
import getpass
import re
import secrets
import sys

from ops.command import Command, run_command
from server.console.auth import MIN_SECRET, hash_secret
from server.console import session_sql as sessions_db
from server.db import service_settings
from server.db.embedded import EmbeddedPostgres
from server.db.service_settings import CONSOLE_SECRET_SET
from server.db.pool import Database
from server.timestamps import iso_utc
from server.settings import CONSOLE_ROLES, Settings

NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    credential = actions.add_parser("credential", help="a sign-in for one person: prints the "
                                    "CONSOLE_USERS entry to add")
    credential.add_argument("name", help="who signs in (letters, digits, . _ @ -)")
    credential.add_argument("role", choices=CONSOLE_ROLES,
                            help="support reads; operator reads and changes")
    credential.add_argument("--password", action="store_true",
                            help=f"type a secret (at least {MIN_SECRET} characters) instead "
                                 "of getting a random one (twice; on a pipe, two lines)")
    credential.add_argument("--rotate-secret", action="store_true",
                            help="print a new CONSOLE_SECRET even though the service has one "
                                 "(signs every session out once it is set)")
    sessions = actions.add_parser("sessions", help="who is signed in; `end NAME` signs them "
                                  "out everywhere")
    ending = sessions.add_subparsers(dest="sessions_action")
    end = ending.add_parser("end", help="end every session of NAME now")
    end.add_argument("name")


def _typed_secret() -> str:
    """Typed twice at a terminal; from a pipe, its first two lines."""
    try:
        if sys.stdin.isatty():
            secret, again = getpass.getpass("secret: "), getpass.getpass("again: ")
        else:
            secret, again = sys.stdin.readline(), sys.stdin.readline()
            if not again:
                raise EOFError
            secret, again = secret.rstrip("\n"), again.rstrip("\n")
    except EOFError:
        raise ValueError("the secret is asked twice: type it twice, or pipe two lines") from None
    if secret != again:
        raise ValueError("the two secrets differ")
    return secret


def console(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "sessions":
        return run_command("router-backend console", functools.partial(
            _sessions, end=getattr(args, "name", None)), settings=settings)
    if not NAME.fullmatch(args.name):
        print(f"router-backend console: not a name: {args.name!r}", file=sys.stderr)
        return 2
    try:
        secret = _typed_secret() if args.password else secrets.token_urlsafe(18)
        if len(secret) < MIN_SECRET:
            raise ValueError(f"a secret has at least {MIN_SECRET} characters")
        entry = f"{args.name}:{args.role}:{hash_secret(secret)}"
    except ValueError as error:
        print(f"router-backend console: {error}", file=sys.stderr)
        return 2
    if not args.password:
        print(f"secret for {args.name} (shown once, only its hash is kept):\n{secret}\n")
    print(f"add to CONSOLE_USERS (entries separated by commas):\n{entry}\n(in .env or a "
          "shell, between single quotes: the hash holds '$', which double quotes expand)")
    if settings.embedded_database and \
            not EmbeddedPostgres(settings.data_dir / "postgres").initialised:
        # Before the first start: no service has a secret yet, and none is needed to make one.
        if not settings.console_secret:
            _print_secret(rotate=False)
        return 0
    return run_command("router-backend console", functools.partial(
        _console_secret, rotate=args.rotate_secret), settings=settings)


def _print_secret(rotate: bool) -> None:
    print(f"\nand set CONSOLE_SECRET, the same in every process of the host"
          f"{' (replacing the one set: every session ends)' if rotate else ''}:\n"
          f"{secrets.token_urlsafe(36)}")


async def _console_secret(settings: Settings, db: Database, rotate: bool) -> int:
    """A CONSOLE_SECRET to set, the first time only: not when this command's settings or the
    running service's (server/db/service_settings.py) have one, unless asked to rotate."""
    service_has = (await service_settings.service_setting(db, CONSOLE_SECRET_SET)) == "true"
    if rotate or not (settings.console_secret or service_has):
        _print_secret(rotate)
    else:
        print("\nCONSOLE_SECRET is set for the service: keep it (--rotate-secret prints a new "
              "one)")
    return 0


async def _sessions(settings: Settings, db: Database, end: str | None) -> int:
    if end is not None:
        ended = await sessions_db.end_all_of(db, end)
        print(f"{ended} session{'s' if ended != 1 else ''} of {end} ended")
        return 0
    print("name\tstarted_at\tlast_seen_at\taddress\texpires_at")
    for name, started, seen, address, expires in await sessions_db.live(db):
        print(f"{name}\t{iso_utc(started)}\t{iso_utc(seen)}\t{address}\t{iso_utc(expires)}")
    return 0


COMMAND = Command("console", "console sign-ins: make a CONSOLE_USERS entry; list or end "
                  "sessions",
                  add_arguments, console)
