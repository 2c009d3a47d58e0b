"""Schema set-up: create the database when missing and apply yoyo migrations (the service at
start-up and `router-backend migrate`), or only check that the schema is the one this
release expects (every other command, which must write nothing).

Blocking; callers run it in a thread. Safe when several processes start at once
(migrations are applied under a PostgreSQL advisory lock, which a crashed holder releases)
and when one is killed at any point (each migration commits with its record).
"""

from __future__ import annotations

import contextlib
import logging
import time

import psycopg
from psycopg import sql
from yoyo import get_backend

from migrations import read_schema_migrations
from server.db.connect import connect, execute_alone
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


def database_exists(location: DatabaseLocation) -> bool:
    """Whether the database is there (asked of the server's maintenance database)."""
    return bool(execute_alone(location.with_name("postgres"),
                              "SELECT 1 FROM pg_database WHERE datname = %s", (location.name,)))


def check_schema(location: DatabaseLocation) -> None:
    """Read-only: SchemaNotReady unless the database exists with exactly this release's
    migrations applied."""
    if not database_exists(location):
        raise SchemaNotReady(
            f"database {location.name!r} does not exist on {location.describe()}: check "
            "DB_NAME, or create it with `router-backend migrate`")
    conn = connect(location)
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
            connect(location.with_name("postgres"), timeout=5).close()
            return
        except psycopg.OperationalError as error:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"database {location.describe()} unreachable: {str(error).strip()}") from None
            time.sleep(0.5)


def ensure_database(location: DatabaseLocation) -> None:
    conn = connect(location.with_name("postgres"), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (location.name,))
            if cur.fetchone() is None:
                log.warning("creating database %s", location.name)
                try:
                    cur.execute(sql.SQL("CREATE DATABASE {}").format(
                        sql.Identifier(location.name)))
                except psycopg.errors.DuplicateDatabase:
                    pass  # another process created it first
    finally:
        conn.close()


def apply_migrations(location: DatabaseLocation) -> list[str]:
    """Apply pending migrations; return the ids applied (empty when up to date).

    Each migration's steps and yoyo's record of it commit in one transaction (yoyo's own
    `apply_one` commits them in two, on two connections, and a process killed between them
    left a migration applied but not recorded, which cannot run again). One left so by an
    earlier release is recognised and recorded (`_applied_unrecorded`)."""
    with _migrator(location) as backend:
        pending = backend.to_apply(read_schema_migrations())
        for migration in pending:
            _apply_one(backend, migration)
        if pending:
            log.warning("applied migrations: %s", ", ".join(m.id for m in pending))
        return [m.id for m in pending]


def roll_back_migrations(location: DatabaseLocation, down_to: str) -> list[str]:
    """Roll back every applied migration numbered above `down_to` (a number such as 0021),
    newest first, each with its rollback script and the removal of its record in one
    transaction; return the ids rolled back. Under the advisory lock, as migrating is."""
    with _migrator(location) as backend:
        newer = read_schema_migrations().filter(lambda m: m.id.split(".")[0] > down_to)
        rolled_back = []
        for migration in backend.to_rollback(newer):
            with backend.transaction():
                migration.process_steps(backend, "rollback")
                backend.log_migration(migration, "rollback")
                backend.unmark_one(migration, log=False)
            rolled_back.append(migration.id)
        if rolled_back:
            log.warning("rolled back migrations: %s", ", ".join(rolled_back))
        return rolled_back


@contextlib.contextmanager
def _migrator(location: DatabaseLocation):
    """yoyo's backend on the database, under the advisory lock that serialises migrators (it
    ends with its session, so a killed migrator never holds it), yoyo's own tables made."""
    lock_conn = connect(location, autocommit=True)
    try:
        with lock_conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        backend = get_backend(location.yoyo_url())
        try:
            _clear_stale_yoyo_lock(backend)
            backend.ensure_internal_schema_updated()
            yield backend
        finally:
            backend.connection.close()
    finally:
        lock_conn.close()  # closing the session releases the advisory lock


def _clear_stale_yoyo_lock(backend) -> None:
    """yoyo takes its lock row (table yoyo_lock) while it creates its own tables; a row left
    there by a killed process would make every later start wait and fail. Under our advisory
    lock no other migrator runs, so any row there is stale."""
    with backend.transaction():
        cursor = backend.execute("SELECT to_regclass('yoyo_lock') IS NOT NULL")
        present = cursor.fetchone()[0]
    if present:
        backend.break_lock()


def _apply_one(backend, migration) -> None:
    """The migration's steps and its record, committed together."""
    try:
        with backend.transaction():
            migration.process_steps(backend, "apply")
            _record(backend, migration)
    except backend.DatabaseError:
        if not _applied_unrecorded(backend, migration):
            raise
        with backend.transaction():
            _record(backend, migration)
        log.warning("migration %s was found applied but not recorded (an interrupted start "
                    "of an earlier release): recorded", migration.id)


def _record(backend, migration) -> None:
    backend.log_migration(migration, "apply")
    backend.mark_one(migration, log=False)


def _applied_unrecorded(backend, migration) -> bool:
    """Whether the schema already is what `migration` makes, though yoyo has no record of it.
    Its steps committed atomically, so the schema is either the one before it or the one
    after it: the one after it is the one its rollback script and then its steps turn back
    into itself. Tried in a transaction that is always rolled back."""
    try:
        with backend.transaction(rollback_on_exit=True):
            before = _schema_fingerprint(backend)
            migration.process_steps(backend, "rollback")
            migration.process_steps(backend, "apply")
            return _schema_fingerprint(backend) == before
    except backend.DatabaseError:
        return False


# Every table (partitions aside: the partition job makes those), column, index, constraint,
# function and trigger of the schema, as one digest; columns by name, so a column a rollback
# dropped and re-added compares equal.
SCHEMA_FINGERPRINT_SQL = """
SELECT md5(string_agg(item, E'\n' ORDER BY item)) FROM (
    SELECT 'rel ' || c.relname || ' ' || c.relkind::text
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = current_schema() AND NOT c.relispartition
       AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
    UNION ALL
    SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
           || ' ' || a.attnotnull || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE n.nspname = current_schema() AND NOT c.relispartition AND a.attnum > 0
       AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm')
    UNION ALL
    SELECT 'idx ' || pg_get_indexdef(i.indexrelid)
      FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = current_schema() AND NOT c.relispartition
    UNION ALL
    SELECT 'con ' || c.relname || ' ' || pg_get_constraintdef(k.oid)
      FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = current_schema() AND NOT c.relispartition
    UNION ALL
    SELECT 'fn ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') '
           || md5(p.prosrc)
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = current_schema()
    UNION ALL
    SELECT 'trg ' || pg_get_triggerdef(t.oid)
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = current_schema() AND NOT t.tgisinternal AND NOT c.relispartition
) items(item)
"""


def _schema_fingerprint(backend) -> str:
    return backend.execute(SCHEMA_FINGERPRINT_SQL).fetchone()[0]


def prepare_schema(location: DatabaseLocation, partition_days: int) -> None:
    """Apply pending migrations, then create the time partitions the next days need, so an
    insert never finds no partition (the hourly `partitions` job keeps them ahead)."""
    apply_migrations(location)
    created = ensure_partitions(location, partition_days)
    if created:
        log.info("created partitions: %s", ", ".join(created))
