"""Fixtures that assemble the service the way production does, on a real PostgreSQL.

The database server is the embedded one (started once per session in a temporary directory,
in memory when the machine has the room: testkit/database.py `memory_directory`)
unless TEST_DB_HOST is set, in which case TEST_DB_PORT/TEST_DB_USER/TEST_DB_PASSWORD name a
server to use (TEST_CITUS_HOST... name a Citus coordinator, and win). Each test gets its
own database, cloned from a template migrated once.
The helpers themselves live in `testkit/`, which the benchmarks share.
"""

from __future__ import annotations

import io
import logging
import os

import pytest

from server.app import create_app
from server.db.location import DatabaseLocation
from server.logs import default_handler
from server.settings import Settings
from testkit.database import (Sql, citus_workers, database_server, migrated_database,
                              settings_for)


@pytest.fixture(scope="session")
def pg_server() -> DatabaseLocation:
    """The maintenance database of the PostgreSQL server the tests use: the Citus
    coordinator named by TEST_CITUS_HOST/TEST_CITUS_PORT when set (its workers added in its
    `postgres` database; docs/scaling.md), else as above."""
    prefix = "TEST_CITUS_" if os.environ.get("TEST_CITUS_HOST") else "TEST_DB_"
    with database_server(prefix, in_memory=True) as server:
        yield server


@pytest.fixture(scope="session")
def template_database(pg_server) -> DatabaseLocation:
    with migrated_database(pg_server, "rb_template") as template:
        yield template


@pytest.fixture
def database(pg_server, template_database) -> DatabaseLocation:
    """A fresh, migrated database for one test."""
    with migrated_database(pg_server, "rb_test", template=template_database) as location:
        yield location


@pytest.fixture(scope="session")
def distributed(pg_server) -> bool:
    """Whether the tests run on a Citus coordinator (each test database distributed)."""
    return bool(citus_workers(pg_server))


@pytest.fixture
def single_server_database(pg_server, database) -> DatabaseLocation:
    """A migrated database of one server, for migrations rolled back and forth: `database`
    on plain PostgreSQL; on a Citus coordinator, one of the coordinator's own, not
    distributed (the Citus mode distributes a database after its migrations: a distributed
    table refuses, for one, the trigger an older migration made)."""
    if not citus_workers(pg_server):
        yield database
        return
    with migrated_database(pg_server, "rb_single", distributed=False) as location:
        yield location


@pytest.fixture
def settings(database, tmp_path) -> Settings:
    return settings_for(database, tmp_path)


@pytest.fixture
def make_client(request):
    """Build the real app from settings and connect a real HTTP client to it. The test's
    database, when it has one, is set up before the clients and so dropped after them:
    an app whose database went first waited a second for a connection at its close."""
    if "database" in request.fixturenames:
        request.getfixturevalue("database")
    aiohttp_client = request.getfixturevalue("aiohttp_client")

    async def make(settings: Settings):
        return await aiohttp_client(create_app(settings))
    return make


@pytest.fixture
async def client(make_client, settings):
    return await make_client(settings)


@pytest.fixture
def sql(database) -> Sql:
    return Sql(database)


@pytest.fixture
def access_lines():
    """The access lines written while the test runs, as the service's default logging writes
    them (server/logs.py): call it for the lines so far."""
    stream = io.StringIO()
    handler = default_handler(stream)
    logger = logging.getLogger("aiohttp.access")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lambda: stream.getvalue().splitlines()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
