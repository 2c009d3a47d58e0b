"""Throw-away PostgreSQL databases on a real server, and plain checks against them.

The server is the one named by environment variables with a prefix (`TEST_DB_HOST`... for
the tests, `DB_HOST`... for the benchmarks) or, when its host variable is unset, an embedded
PostgreSQL started in a temporary directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator, Mapping

import psycopg
from psycopg import sql as pgsql
from yoyo import get_backend

from migrations import read_schema_migrations
from server.db.citus_nodes import add_node, distribute, workers
from server.db.connect import connect, execute_alone
from server.db.embedded import EmbeddedPostgres, ensure_group_commit
from server.db.location import DatabaseLocation
from server.db.migrate import ensure_database, prepare_schema
from server.db.partitions import TIME_COLUMNS, ensure_partitions
from server.settings import Settings, load_settings


# Where the tests' embedded server keeps its data when the machine has the room: a memory
# file system. Each test's database is a copy of a template (some 1,000 files) dropped after
# it, and on ext4 creating files among so many just deleted costs the kernel most of a copy
# (`recently_deleted`, in `perf record` of the copying backend: 0.5 s a copy on these
# machines, 0.05 s on tmpfs). The benchmarks keep theirs on disk, as an operator's is.
MEMORY_DIRECTORY = Path("/dev/shm")
MEMORY_NEEDED = 4 << 30  # bytes free: the WAL kept (max_wal_size, 1 GB) and the databases


def memory_directory() -> Path | None:
    """MEMORY_DIRECTORY when it is there with MEMORY_NEEDED free, else None (the temporary
    directory)."""
    try:
        room = os.statvfs(MEMORY_DIRECTORY)
    except OSError:
        return None
    return MEMORY_DIRECTORY if room.f_bavail * room.f_frsize >= MEMORY_NEEDED else None


@contextlib.contextmanager
def database_server(prefix: str, environ: Mapping[str, str] = os.environ,
                    in_memory: bool = False) -> Iterator[DatabaseLocation]:
    """The maintenance database (`postgres`) of the server to use, for as long as needed; an
    embedded one's data in memory_directory() with `in_memory`."""
    host = environ.get(f"{prefix}HOST")
    if host:
        yield DatabaseLocation(host, int(environ.get(f"{prefix}PORT", "5432")), "postgres",
                               environ.get(f"{prefix}USER", "postgres"),
                               environ.get(f"{prefix}PASSWORD", ""), "prefer")
        return
    place = memory_directory() if in_memory else None
    with tempfile.TemporaryDirectory(prefix="pg-", dir=place) as directory:
        embedded = EmbeddedPostgres(Path(directory) / "pgdata")
        socket_dir = embedded.start()
        try:
            ensure_group_commit(socket_dir)  # as the service's own embedded server has it
            yield DatabaseLocation(socket_dir, 5432, "postgres", "postgres", "", "disable")
        finally:
            embedded.stop()


# Shards per distributed table in the tests' Citus databases: Citus's default of 32 would
# make each test database some 2,000 tables to clone; 4 still spread routers over workers.
CITUS_TEST_SHARDS = 4


@functools.lru_cache(maxsize=None)
def citus_workers(server: DatabaseLocation) -> tuple[DatabaseLocation, ...]:
    """The workers of a Citus coordinator, as its maintenance database lists them (added with
    citus_add_node there); none on plain PostgreSQL."""
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass('pg_catalog.pg_dist_node') IS NOT NULL")
            if not cur.fetchone()[0]:
                return ()
            return tuple(dataclasses.replace(server, host=host, port=port)
                         for host, port in workers(cur))
    finally:
        conn.close()


@contextlib.contextmanager
def migrated_database(server: DatabaseLocation, prefix: str = "rb",
                      template: DatabaseLocation | None = None, distributed: bool = True
                      ) -> Iterator[DatabaseLocation]:
    """A new database on `server`, migrated (or cloned from a migrated `template`), dropped
    afterwards. A clone gets the partitions its own day needs, as the service does at start:
    the template may have been made before midnight. On a Citus coordinator the database
    is made on every node and distributed (server/db/citus_nodes.py), unless not `distributed`
    (a single server's database on the coordinator: for migrations rolled back and forth);
    a clone is cloned on every node, shards and Citus's metadata with it."""
    location = server.with_name(f"{prefix}_{uuid.uuid4().hex[:12]}")
    workers = citus_workers(server) if distributed else ()
    nodes = (server, *workers)
    try:
        if template is None:
            ensure_database(location)  # and on each worker by join_citus
            if workers:
                with _cluster_wide_lock(server):
                    join_citus(location, workers)
            prepare_schema(location, partition_days=1)
            if workers:
                with _cluster_wide_lock(server):
                    distribute(location, CITUS_TEST_SHARDS)
        else:
            for node in nodes:
                _clone(node, template.name, location.name)
            ensure_partitions(location, 1)
        yield location
    finally:
        if workers:  # transactions a worker's stop left prepared there (a drill's)
            with contextlib.suppress(psycopg.Error):
                execute_alone(location, "SELECT recover_prepared_transactions()")
        for node in nodes:
            _retried_while_in_use(node, pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                                  .format(pgsql.Identifier(location.name)))


# The key of the lock that keeps the test processes' Citus set-ups apart (any number: no other
# session takes advisory locks in the maintenance database).
CLUSTER_WIDE_LOCK_KEY = 0x7465_7374


@contextlib.contextmanager
def _cluster_wide_lock(server: DatabaseLocation) -> Iterator[None]:
    """One test process at a time adds workers to its database or distributes its tables:
    both make Citus sync its roles to every worker (`worker_create_or_alter_role`), and roles
    are shared by all the databases of a node, so two processes doing so at once can fail
    each other ("tuple concurrently updated", then "failure on connection marked as
    essential"). The lock is taken in the coordinator's maintenance database, which every
    test process shares."""
    conn = connect(server, autocommit=True)
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (CLUSTER_WIDE_LOCK_KEY,))
        yield
    finally:
        conn.close()  # releases the lock


def join_citus(location: DatabaseLocation, workers: tuple[DatabaseLocation, ...]) -> None:
    """The citus extension in `location`'s database on the coordinator, the coordinator
    named, and each worker added with the operator's `add_node` (which makes the database
    and the extension on it)."""
    execute_alone(location, "CREATE EXTENSION IF NOT EXISTS citus")
    execute_alone(location, "SELECT citus_set_coordinator_host(%s, %s)",
                  (location.host, location.port))
    for worker in workers:
        _add_node(location, worker)


def _add_node(location: DatabaseLocation, worker: DatabaseLocation, attempts: int = 5) -> None:
    """`add_node`, tried again when the worker failed it. Its metadata sync failed in one
    CI run ("failure on connection marked as essential", the worker's own error only in a
    warning, now a note on the error): two test processes syncing the shared roles at once
    (`_cluster_wide_lock` now keeps them apart); the retry stays for a cause not yet seen.
    Adding a node that is already there changes nothing, so a retry is safe."""
    for attempt in range(attempts):
        try:
            add_node(location, worker.host, worker.port)
            return
        except psycopg.errors.InternalError_:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


def _clone(server: DatabaseLocation, template: str, name: str) -> None:
    """CREATE DATABASE name TEMPLATE template, once no session is connected to the template
    (on a Citus node its maintenance daemon is: it is stopped, and starts again when a
    session of the template's uses Citus)."""
    _retried_while_in_use(server, pgsql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
        pgsql.Identifier(name), pgsql.Identifier(template)), template)


def _retried_while_in_use(server: DatabaseLocation, statement, database: str | None = None
                          ) -> None:
    """`statement`, tried again while a session (on a Citus node: its maintenance daemon,
    or a connection between nodes on its way out) uses the database it needs alone; with
    `database`, those sessions are ended first."""
    for attempt in range(20):
        if database is not None:
            execute_alone(server, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE datname = %s AND pid <> pg_backend_pid()", (database,))
        try:
            execute_alone(server, statement)
            return
        except psycopg.errors.ObjectInUse:
            if attempt == 19:
                raise
            time.sleep(0.2)


def migrate(location: DatabaseLocation, migration: str, direction: str = "apply") -> None:
    """Apply the migrations up to `migration`, or roll back down to it (included)."""
    backend = get_backend(location.yoyo_url())
    try:
        migrations = read_schema_migrations()
        if direction == "apply":
            backend.apply_migrations(backend.to_apply(
                migrations.filter(lambda m: m.id <= migration)))
        else:
            backend.rollback_migrations(backend.to_rollback(
                migrations.filter(lambda m: m.id >= migration)))
    finally:
        backend.connection.close()


def partitions_for_history(location: DatabaseLocation, days: int) -> None:
    """Daily partitions for the last `days` days in place of the legacy partition (which must
    be empty), so that rows of the past land in partitions of their own day."""
    for table in TIME_COLUMNS:  # one statement at a time: Citus takes no command lists here
        execute_alone(location, f"ALTER TABLE {table} DETACH PARTITION {table}_legacy")
        execute_alone(location, f"DROP TABLE {table}_legacy")
    ensure_partitions(location, 1, since=datetime.now(timezone.utc) - timedelta(days=days))


class Sql:
    """Synchronous checks against a database, independent of the service's code."""

    def __init__(self, location: DatabaseLocation):
        self.location = location

    def rows(self, statement: str, params=None) -> list[tuple]:
        conn = connect(self.location)
        try:
            with conn.transaction(), conn.cursor() as cur:
                self.prepare(cur)
                cur.execute(statement, params)
                while cur.nextset():  # several statements: the last one's rows
                    pass
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def value(self, statement: str, params=None):
        return self.rows(statement, params)[0][0]

    def prepare(self, cur) -> None:
        """Set up the session before each check (nothing here)."""


def database_env(location: DatabaseLocation) -> dict[str, str]:
    """The service's settings that point it at `location`."""
    return {"DB_HOST": location.host, "DB_PORT": str(location.port), "DB_NAME": location.name,
            "DB_USER": location.user, "DB_PASSWORD": location.password,
            "DB_SSLMODE": location.sslmode}


# Tests, benchmarks and drills play whole fleets from one address at rates no router makes;
# the flood limits are raised for them unless a test sets its own (tests/test_limits.py) or
# a drill asks for the defaults (the hostile drill).
NO_FLOOD_LIMITS = {"ROUTER_REQUESTS_PER_MINUTE": "1000000000",
                   "ROUTER_RECORDS_PER_MINUTE": "1000000000",
                   "REGISTRATIONS_PER_MINUTE_PER_ADDRESS": "1000000000",
                   "FAILED_CREDENTIALS_PER_MINUTE_PER_ADDRESS": "1000000000",
                   # A test that counts its 429s one after another is not kept waiting.
                   "TOO_MANY_REQUESTS_DELAY_SECONDS": "0"}
# The tests stand for a proxy on loopback (the shipped Caddy on the same host) when they send
# X-Forwarded-For; the service's own default trusts no proxy.
LOOPBACK_PROXY = {"TRUSTED_PROXIES": "127.0.0.1/32,::1/128"}
# No ruleset download at start-up (the default archive is on the internet) unless a test
# asks for it with a local archive (tests/test_first_start.py).
NO_PREPROCESS_AT_START = {"RULE_PREPROCESS_AT_START": "false"}


def settings_for(location: DatabaseLocation, data_dir: Path, **overrides: str) -> Settings:
    """Settings as a test uses them: this database, a private DATA_DIR, short database
    timeouts, no generation queue unless asked for, flood limits raised, the hunt index
    packed only when a test packs it (the job's hourly tick, caught up at start, would hold
    the packing lock while the test asks for a packing: `hunt compact` runs the same code),
    and the weekly reports made only when a test makes them (`reports weekly`)."""
    environ = {**database_env(location), "DATA_DIR": str(data_dir), "DB_TIMEOUT_SECONDS": "5",
               "RULE_GENERATION_ENABLED": "false", "HUNT_COMPACT_CRON_SCHEDULE": "0 0 1 1 *",
               "WEEKLY_REPORTS_CRON_SCHEDULE": "off",
               **NO_FLOOD_LIMITS, **NO_PREPROCESS_AT_START, **LOOPBACK_PROXY, **overrides}
    return load_settings(environ, env_file=None)


def command_env(settings: Settings, **extra: str) -> dict[str, str]:
    """Environment for running an operator command (a child process) on these settings."""
    return {**os.environ, **database_env(DatabaseLocation.from_settings(settings)),
            "DATA_DIR": str(settings.data_dir), "RULE_DATA_DIR": str(settings.rule_data_path),
            "RULE_GENERATION_SAMPLE_COUNT": str(settings.rule_generation_sample_count),
            "RULE_GENERATION_FIRED_PERCENT": str(settings.rule_generation_fired_percent),
            "ROUTER_AUTH": settings.router_auth, **extra}


@contextlib.contextmanager
def throwaway_database(prefix: str = "DB_") -> Iterator[tuple[DatabaseLocation, Path]]:
    """A new migrated database and a work directory, both removed afterwards (what each
    benchmark and drill starts from)."""
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir_name:
        with database_server(prefix) as server, migrated_database(server, "bench") as location:
            yield location, Path(workdir_name)
