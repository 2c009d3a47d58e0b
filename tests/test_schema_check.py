"""Only `serve` and `router-backend migrate` create the database and apply migrations; every
other command checks the schema and, when it is not this release's, exits with what to run
and writes nothing (issue 24)."""

from __future__ import annotations

import os
import subprocess
import sys

from server.db.migrate import release_schema_version
from testkit.database import Sql, command_env, migrate, settings_for
from tests.commands import router_backend


def command(settings, *args: str, **env: str) -> subprocess.CompletedProcess:
    return router_backend(command_env(settings, **env), *args)


def schema_snapshot(sql: Sql) -> tuple:
    tables = sql.rows("SELECT table_name FROM information_schema.tables "
                      "WHERE table_schema = 'public' ORDER BY 1")
    applied = sql.rows("SELECT migration_id FROM _yoyo_migration ORDER BY 1")
    return tables, applied


def test_commands_refuse_a_schema_one_migration_behind_and_change_nothing(
        single_server_database, tmp_path):
    database, sql = single_server_database, Sql(single_server_database)
    latest = release_schema_version()
    previous = f"{int(latest) - 1:04d}"
    migrate(database, latest, direction="rollback")
    before = schema_snapshot(sql)
    settings = settings_for(database, tmp_path)
    for args in (("status",), ("rules", "overrides"), ("retention",)):
        result = command(settings, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert (f"schema is at {previous}, this release needs {latest}: run "
                "`router-backend migrate`") in result.stderr
    assert schema_snapshot(sql) == before

    migrated = command(settings, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert f"is at schema {latest}" in migrated.stdout
    assert schema_snapshot(sql) != before
    assert command(settings, "status").returncode == 0


def test_a_mistyped_db_name_creates_nothing(database, tmp_path, sql):
    settings = settings_for(database, tmp_path)
    typo = f"{database.name}_typo"
    result = command(settings, "status", DB_NAME=typo)
    assert result.returncode == 1
    assert f"database '{typo}' does not exist" in result.stderr
    assert "check DB_NAME" in result.stderr
    assert sql.value("SELECT count(*) FROM pg_database WHERE datname = %s", (typo,)) == 0


def test_a_command_on_an_empty_data_dir_starts_no_embedded_server(tmp_path):
    data_dir = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, "-m", "ops.cli", "status"], capture_output=True, text=True,
        timeout=60, env={**{key: value for key, value in os.environ.items() if not key.startswith("DB_")},
             "DATA_DIR": str(data_dir)})
    assert result.returncode == 1
    assert f"no embedded database in {data_dir / 'postgres'}" in result.stderr
    assert "router-backend serve" in result.stderr
    assert not (data_dir / "postgres").exists()
