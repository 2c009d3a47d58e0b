"""`router-backend backup` and `router-backend restore`: the service's database copied with
PostgreSQL's own tools while the service runs, and put back (server/db/backup.py).

    router-backend backup [--output FILE]
    router-backend restore FILE [--replace]

A backup goes to DATA_DIR/backups/ by default, named by its time and schema. A restore needs
the service stopped (on this host it refuses while one holds DATA_DIR, and holds it itself so
none starts meanwhile), an empty or missing database (`--replace` drops the one there), and
then brings the restored schema up to this release.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone
from pathlib import Path

from server.db.backup import (BackupError, database_has_tables, dump, load, program,
                              recreate_database)
from server.db.lifecycle import prepare_database, reach_server
from server.db.migrate import prepare_schema, release_schema_version
from server.process.instance import only_service_on
from server.settings import Settings

PROG = "router-backend"


def add_backup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, default=None,
                        help="the backup file (default: DATA_DIR/backups/"
                             "router-backend-TIME-schemaN.dump)")


def add_restore_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="a file `router-backend backup` made")
    parser.add_argument("--replace", action="store_true",
                        help="drop the database there first (every record in it is lost)")


def backup(settings: Settings, args: argparse.Namespace) -> int:
    location, embedded = prepare_database(settings)
    try:
        pg_dump = program("pg_dump", embedded is not None, location)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        target = args.output or (settings.data_dir / "backups" /
                                 f"router-backend-{stamp}-schema{release_schema_version()}.dump")
        began = time.monotonic()
        dump(location, pg_dump, target)
        took = time.monotonic() - began
    finally:
        if embedded is not None:
            embedded.stop()
    print(f"{PROG} backup: {target} ({target.stat().st_size / 1e6:.1f} MB, schema "
          f"{release_schema_version()}) in {took:.1f} s")
    return 0


def restore(settings: Settings, args: argparse.Namespace) -> int:
    if not args.file.is_file():
        raise BackupError(f"{args.file}: no such backup file")
    with only_service_on(settings, doing="restoring a backup"):
        location, embedded = reach_server(settings)
        try:
            pg_restore = program("pg_restore", embedded is not None, location)
            if database_has_tables(location) and not args.replace:
                raise BackupError(f"database {location.name!r} on {location.describe()} is not "
                                  "empty: restore into a new DATA_DIR or DB_NAME, or give "
                                  "--replace to drop it first")
            began = time.monotonic()
            recreate_database(location)
            load(location, pg_restore, args.file)
            prepare_schema(location, settings.telemetry_partition_days)
            took = time.monotonic() - began
        finally:
            if embedded is not None:
                embedded.stop()
    print(f"{PROG} restore: {args.file} restored into {location.name!r} on "
          f"{location.describe()} (now at schema {release_schema_version()}) in {took:.1f} s")
    return 0
