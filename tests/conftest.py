"""Fixtures that assemble the service the way production does, on a real PostgreSQL.

The database server is the embedded one (started once per session in a temporary directory)
unless TEST_DB_HOST is set, in which case TEST_DB_PORT/TEST_DB_USER/TEST_DB_PASSWORD name a
server to use. Each test gets its own database, cloned from a template migrated once.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psycopg2
import pytest
from psycopg2 import sql as pgsql

from server.app import create_app
from server.db.embedded import EmbeddedPostgres
from server.db.location import DatabaseLocation
from server.db.migrate import apply_migrations, ensure_database
from server.settings import Settings, load_settings

SHARED = Path(__file__).resolve().parents[2] / "shared"
CORPUS = SHARED / "corpus"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def corpus_path(*parts: str) -> Path:
    path = CORPUS.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"corpus file {path} is absent (../shared/corpus is optional)")
    return path


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory) -> DatabaseLocation:
    """The maintenance database of the PostgreSQL server the tests use."""
    host = os.environ.get("TEST_DB_HOST")
    if host:
        yield DatabaseLocation(host=host, port=int(os.environ.get("TEST_DB_PORT", "5432")),
                               name="postgres", user=os.environ.get("TEST_DB_USER", "postgres"),
                               password=os.environ.get("TEST_DB_PASSWORD", ""),
                               sslmode="prefer")
        return
    embedded = EmbeddedPostgres(tmp_path_factory.mktemp("embedded") / "pgdata")
    socket_dir = embedded.start()
    try:
        yield DatabaseLocation(host=socket_dir, port=5432, name="postgres", user="postgres",
                               password="", sslmode="disable")
    finally:
        embedded.stop()


def admin_execute(location: DatabaseLocation, statement, params=None) -> None:
    conn = psycopg2.connect(**location.connect_kwargs())
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(statement, params)
    finally:
        conn.close()


@pytest.fixture(scope="session")
def template_database(pg_server) -> DatabaseLocation:
    template = pg_server.with_name(f"rb_template_{uuid.uuid4().hex[:12]}")
    ensure_database(template)
    apply_migrations(template)
    yield template
    admin_execute(pg_server, pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
        pgsql.Identifier(template.name)))


@pytest.fixture
def database(pg_server, template_database) -> DatabaseLocation:
    """A fresh, migrated database for one test."""
    location = pg_server.with_name(f"rb_test_{uuid.uuid4().hex[:12]}")
    admin_execute(pg_server, pgsql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
        pgsql.Identifier(location.name), pgsql.Identifier(template_database.name)))
    yield location
    admin_execute(pg_server, pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
        pgsql.Identifier(location.name)))


def settings_for(location: DatabaseLocation, data_dir: Path, **overrides: str) -> Settings:
    environ = {"DB_HOST": location.host, "DB_PORT": str(location.port), "DB_NAME": location.name,
               "DB_USER": location.user, "DB_PASSWORD": location.password,
               "DB_SSLMODE": location.sslmode, "DATA_DIR": str(data_dir),
               "DB_TIMEOUT_SECONDS": "5", "RULE_GENERATION_ENABLED": "false", **overrides}
    return load_settings(environ, env_file=None)


def command_env(settings: Settings, **extra: str) -> dict[str, str]:
    """Environment for running an operator command (a child process) on these settings."""
    return {**os.environ, "DB_HOST": settings.db_host, "DB_PORT": str(settings.db_port),
            "DB_NAME": settings.db_name, "DB_USER": settings.db_user,
            "DB_PASSWORD": settings.db_password, "DB_SSLMODE": settings.db_sslmode,
            "DATA_DIR": str(settings.data_dir), "RULE_DATA_DIR": str(settings.rule_data_path),
            "RULE_GENERATION_SAMPLE_COUNT": str(settings.rule_generation_sample_count),
            **extra}


@pytest.fixture
def settings(database, tmp_path) -> Settings:
    return settings_for(database, tmp_path)


@pytest.fixture
async def make_client(aiohttp_client):
    """Build the real app from settings and connect a real HTTP client to it."""
    async def make(settings: Settings):
        return await aiohttp_client(create_app(settings))
    return make


@pytest.fixture
async def client(make_client, settings):
    return await make_client(settings)


class Sql:
    """Synchronous checks against the test database, independent of the service's code."""

    def __init__(self, location: DatabaseLocation):
        self.location = location

    def rows(self, statement: str, params=None) -> list[tuple]:
        conn = psycopg2.connect(**self.location.connect_kwargs())
        try:
            with conn, conn.cursor() as cur:
                cur.execute(statement, params)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def value(self, statement: str, params=None):
        return self.rows(statement, params)[0][0]


@pytest.fixture
def sql(database) -> Sql:
    return Sql(database)
