"""Schema set-up: create the database when missing and apply yoyo migrations (the service at
start-up and `router-backend migrate`), or only check that the schema is the one this
release expects (every other command, which must write nothing).

Blocking (psycopg2); callers run it in a thread. Safe when several processes start at once:
migrations are applied under a PostgreSQL advisory lock, which a crashed holder releases.
"""

from __future__ import annotations

import logging
import time

import psycopg2
from psycopg2 import sql
from yoyo import get_backend

from migrations import read_schema_migrations
from server.db.location import DatabaseLocation
from server.db.partitions import ensure_partitions

log = logging.getLogger("router_backend.db")

MIGRATION_LOCK_KEY = 7_302_145_001  # any constant shared by every process of this service

class SchemaNotReady(Exception):
    """The database is missing, or its schema is not the one this release expects; the
    message says what to run."""


def schema_version(migration_ids) -> str:
    """The schema version a set of applied migrations makes: the number of the latest."""
    return max(migration_ids).split(".")[0] if migration_ids else "none"


def release_schema_version() -> str:
    """The schema version this release's migrations make."""
    return schema_version({migration.id for migration in read_schema_migrations()})


def check_schema(location: DatabaseLocation) -> None:
    """Read-only: SchemaNotReady unless the database exists with exactly this release's
    migrations applied."""
    conn = psycopg2.connect(**location.with_name("postgres").connect_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (location.name,))
            exists = cur.fetchone() is not None
    finally:
        conn.close()
    if not exists:
        raise SchemaNotReady(
            f"database {location.name!r} does not exist on {location.describe()}: check "
            "DB_NAME, or create it with `router-backend migrate`")
    conn = psycopg2.connect(**location.connect_kwargs())
    try:
        with conn.cursor() as cur:
            # yoyo's record of applied migrations (absent until yoyo first ran here).
            cur.execute("SELECT to_regclass('_yoyo_migration') IS NOT NULL")
            applied = set()
            if cur.fetchone()[0]:
                cur.execute("SELECT migration_id FROM _yoyo_migration")
                applied = {row[0] for row in cur.fetchall()}
    finally:
        conn.close()
    expected = {migration.id for migration in read_schema_migrations()}
    if applied - expected:
        raise SchemaNotReady(
            f"schema is at {schema_version(applied)}, newer than this release "
            f"({schema_version(expected)}): upgrade this install")
    if expected - applied:
        raise SchemaNotReady(
            f"schema is at {schema_version(applied)}, this release needs "
            f"{schema_version(expected)}: run `router-backend migrate`")


def wait_until_reachable(location: DatabaseLocation, timeout: float) -> None:
    """Retry connecting to the server's maintenance database until it answers or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg2.connect(**location.with_name("postgres").connect_kwargs(),
                             connect_timeout=5).close()
            return
        except psycopg2.OperationalError as error:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"database {location.describe()} unreachable: {str(error).strip()}") from None
            time.sleep(0.5)


def ensure_database(location: DatabaseLocation) -> None:
    conn = psycopg2.connect(**location.with_name("postgres").connect_kwargs())
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (location.name,))
            if cur.fetchone() is None:
                log.warning("creating database %s", location.name)
                try:
                    cur.execute(sql.SQL("CREATE DATABASE {}").format(
                        sql.Identifier(location.name)))
                except psycopg2.errors.DuplicateDatabase:
                    pass  # another process created it first
    finally:
        conn.close()


def apply_migrations(location: DatabaseLocation) -> list[str]:
    """Apply pending migrations; return the ids applied (empty when up to date)."""
    lock_conn = psycopg2.connect(**location.connect_kwargs())
    try:
        lock_conn.autocommit = True
        with lock_conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        backend = get_backend(location.yoyo_url())
        try:
            pending = backend.to_apply(read_schema_migrations())
            if pending:
                backend.apply_migrations(pending)
                log.warning("applied migrations: %s", ", ".join(m.id for m in pending))
            return [m.id for m in pending]
        finally:
            backend.connection.close()
    finally:
        lock_conn.close()  # closing the session releases the advisory lock


def prepare_schema(location: DatabaseLocation, partition_days: int) -> None:
    """Apply pending migrations, then create the time partitions the next days need, so an
    insert never finds no partition (the hourly `partitions` job keeps them ahead)."""
    apply_migrations(location)
    created = ensure_partitions(location, partition_days)
    if created:
        log.info("created partitions: %s", ", ".join(created))
