"""`router-backend migrate [--down-to N]`: create the database when missing and apply pending
migrations, then exit: for deployments that migrate as a step of their own before starting
the new release (`serve` also does it at start-up; every other command only checks the
schema). With `--down-to N`, roll back instead to schema N, for the release before an
upgrade (the service stopped)."""

from __future__ import annotations

import argparse
import re

from ops.command import Command
from server.db.lifecycle import prepare_database, reach_server
from server.db.migrate import release_schema_version, roll_back_migrations
from server.process.instance import only_service_on
from server.settings import Settings


def schema_number(text: str) -> str:
    if not re.fullmatch(r"\d{4}", text):
        raise argparse.ArgumentTypeError(f"expected a schema number such as 0021, got {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--down-to", type=schema_number, default=None,
                        help="roll back to this schema (e.g. 0021) instead, for the release "
                             "before an upgrade; the service stopped")


def migrate(settings: Settings, args: argparse.Namespace) -> int:
    if args.down_to is not None:
        return roll_back(settings, args.down_to)
    location, embedded = prepare_database(settings, migrate=True)
    try:
        print(f"router-backend migrate: database {location.name!r} on {location.describe()} "
              f"is at schema {release_schema_version()}")
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


def roll_back(settings: Settings, down_to: str) -> int:
    with only_service_on(settings, doing="rolling back migrations"):
        location, embedded = reach_server(settings)
        try:
            rolled_back = roll_back_migrations(location, down_to)
        finally:
            if embedded is not None:
                embedded.stop()
    print(f"router-backend migrate: rolled back {', '.join(rolled_back) or 'nothing'}; "
          f"database {location.name!r} is at schema {down_to}")
    return 0


COMMAND = Command("migrate", "create the database when missing and apply pending migrations, "
                  "then exit (serve does it too; other commands only check)", add_arguments,
                  migrate)
