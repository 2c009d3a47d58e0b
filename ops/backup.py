"""`router-backend backup`: the service's database copied with PostgreSQL's own tools while
the service runs (ops/pg_backup.py); `router-backend restore` (ops/restore.py) puts it back.

    router-backend backup [--output FILE]
    router-backend backup --base [--output DIR]                # embedded server

A backup goes to DATA_DIR/backups/ by default, named by its time and schema. With --base,
the embedded cluster is backed up whole, for a restore with the WAL archived since
(DB_WAL_ARCHIVE_DIR) replayed.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from ops.command import Command
from ops.pg_backup import BackupError, base_backup, dump, program
from server.db.lifecycle import prepare_database
from server.db.migrate import release_schema_version
from server.settings import Settings

PROG = "router-backend"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, default=None,
                        help="the backup file (default: DATA_DIR/backups/"
                             "router-backend-TIME-schemaN.dump, or ...-base for --base)")
    parser.add_argument("--base", action="store_true",
                        help="a base backup of the embedded cluster, for point-in-time recovery")


def backup_name(settings: Settings, suffix: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return settings.data_dir / "backups" / f"router-backend-{stamp}-{suffix}"


def backup(settings: Settings, args: argparse.Namespace) -> int:
    if args.base and not settings.embedded_database:
        raise BackupError("--base is for the embedded server; with DB_HOST set, back the server "
                          "up with its own tools (pgBackRest, WAL-G: docs/operations.md)")
    location, embedded = prepare_database(settings)
    try:
        began = time.monotonic()
        if args.base:
            target = args.output or backup_name(settings, "base")
            base_backup(location, program("pg_basebackup", True, location), target)
        else:
            target = args.output or backup_name(
                settings, f"schema{release_schema_version()}.dump")
            dump(location, program("pg_dump", embedded is not None, location), target)
        took = time.monotonic() - began
    finally:
        if embedded is not None:
            embedded.stop()
    size = sum(p.stat().st_size for p in target.iterdir()) if target.is_dir() else \
        target.stat().st_size
    print(f"{PROG} backup: {target} ({size / 1e6:.1f} MB, schema {release_schema_version()}) "
          f"in {took:.1f} s")
    if args.base and settings.db_wal_archive_dir is None:
        print(f"{PROG} backup: DB_WAL_ARCHIVE_DIR is unset: this base backup restores the "
              "moment it was made, no later one", file=sys.stderr)
    return 0


COMMAND = Command("backup", "a consistent copy of the database (pg_dump), while the service "
                  "runs", add_arguments, backup)
