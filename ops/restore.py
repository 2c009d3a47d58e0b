"""`router-backend restore`: a backup `router-backend backup` made (ops/backup.py) put back.

    router-backend restore FILE [--replace]
    router-backend restore --base DIR [--until TIME] [--replace]    # embedded server

A restore needs the service stopped (on this host it refuses while one holds DATA_DIR, and
holds it itself so none starts meanwhile), an empty or missing database (`--replace` drops
the one there; with --base, moves DATA_DIR/postgres aside), and then brings the restored
schema up to this release. With --base, the embedded cluster is restored with the WAL
archived since (DB_WAL_ARCHIVE_DIR) replayed up to TIME, or to the end of the archive.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from ops.command import Command, moment
from ops.pg_backup import (BackupError, database_has_tables, load, program, recover,
                           recreate_database)
from server.db.embedded import EmbeddedPostgres
from server.db.lifecycle import configure_db_logging, reach_server
from server.db.location import DatabaseLocation
from server.db.migrate import prepare_schema, release_schema_version
from server.process.instance import only_service_on
from server.settings import Settings

PROG = "router-backend"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="a file (or with --base, a directory) "
                                                "`router-backend backup` made")
    parser.add_argument("--replace", action="store_true",
                        help="drop the database there first (every record in it is lost); "
                             "with --base, move DATA_DIR/postgres aside")
    parser.add_argument("--base", action="store_true",
                        help="FILE is a base backup: recover the embedded cluster from it and "
                             "the WAL archive (DB_WAL_ARCHIVE_DIR)")
    parser.add_argument("--until", type=moment, default=None,
                        help="with --base: replay the archive up to this time (ISO 8601; "
                             "UTC when it names no zone), not to its end")


def restore(settings: Settings, args: argparse.Namespace) -> int:
    if args.base:
        return restore_base(settings, args)
    if args.until is not None:
        raise BackupError("--until goes with --base (a dump restores the moment it was made)")
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


def restore_base(settings: Settings, args: argparse.Namespace) -> int:
    archive = settings.db_wal_archive_dir
    if not settings.embedded_database or archive is None:
        raise BackupError("restore --base is for the embedded server with DB_WAL_ARCHIVE_DIR "
                          "set (the archive whose WAL is replayed)")
    configure_db_logging(settings)
    with only_service_on(settings, doing="restoring a backup"):
        embedded = EmbeddedPostgres(settings.data_dir / "postgres")
        if embedded.pgdata.exists():
            if not args.replace:
                raise BackupError(f"{embedded.pgdata} exists: restore into a new DATA_DIR, or "
                                  "give --replace to move it aside")
            aside = embedded.pgdata.with_name(
                f"postgres.before-restore-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}")
            embedded.pgdata.rename(aside)
            print(f"{PROG} restore: {embedded.pgdata} moved to {aside}", file=sys.stderr)
        began = time.monotonic()
        socket_dir = recover(embedded, args.file, archive, args.until)
        try:
            location = DatabaseLocation.from_settings(settings, host=socket_dir)
            prepare_schema(location, settings.telemetry_partition_days)
        finally:
            embedded.stop()
    print(f"{PROG} restore: {args.file} and the WAL archive replayed "
          f"{'to ' + args.until.isoformat() if args.until else 'to its end'} in "
          f"{time.monotonic() - began:.1f} s; database {location.name!r} at schema "
          f"{release_schema_version()}")
    return 0


COMMAND = Command("restore", "put a backup back into an empty database (the service "
                  "stopped)", add_arguments, restore)
