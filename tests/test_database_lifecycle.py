"""Start-up of the database: the embedded server when DB_HOST is unset, migrations applied
once even when several processes start together."""

from __future__ import annotations

import pytest

import logging
import os
import signal
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import psycopg

from migrations import read_schema_migrations
from server.db import embedded
from server.db.connect import execute_alone
from server.db.embedded import GROUP_COMMIT, embedded_program
from server.db.lifecycle import open_database
from server.db.migrate import apply_migrations, ensure_database
from server.settings import load_settings
from testkit.database import Sql, command_env, settings_for
from testkit.server import ServerRunner
from testkit.workers import processes_on


async def test_embedded_database_started_used_and_stopped(tmp_path):
    settings = load_settings({"DATA_DIR": str(tmp_path)}, env_file=None)
    assert settings.embedded_database
    async with open_database(settings, migrate=True) as db:
        assert await db.fetchone("SELECT count(*) FROM routers") == (0,)
        assert (tmp_path / "postgres" / "PG_VERSION").exists()
        # Group commit (server/db/embedded.py GROUP_COMMIT), written at the service's start.
        assert await db.fetchone("SELECT current_setting('commit_delay'), "
                                 "current_setting('commit_siblings')") == (
            GROUP_COMMIT["commit_delay"], GROUP_COMMIT["commit_siblings"])
    assert processes_on(tmp_path / "postgres") == []


def test_a_failed_start_says_why_from_the_servers_log(tmp_path):
    """A start that fails shows the end of the server's log in its error, not only where the
    log is: a test's temporary directory is gone by the time one looks."""
    pgdata = tmp_path / "postgres"
    server = embedded.EmbeddedPostgres(pgdata)
    server.start()
    server.stop()
    with open(pgdata / "postgresql.auto.conf", "a") as conf:
        conf.write("shared_buffers = 'plenty'\n")
    with pytest.raises(embedded.EmbeddedServerError) as failed:
        server.start()
    assert "pg_ctl failed" in str(failed.value) and "plenty" in str(failed.value), failed.value
    assert processes_on(pgdata) == []


@pytest.mark.drill  # an embedded server started slowly on purpose
def test_a_start_slower_than_the_wheels_timeout_is_waited_for_and_adopted(tmp_path, caplog):
    """The wheel gives `pg_ctl start -w` 10 s. A postmaster slower than that to be ready (an
    archive recovery whose first restore takes 12 s, as a crash recovery on a loaded machine
    can) is waited for and adopted, and stopped with its last user."""
    pgdata = tmp_path / "postgres"
    server = embedded.EmbeddedPostgres(pgdata)
    server.start()
    server.stop()
    (pgdata / "recovery.signal").touch()
    with open(pgdata / "postgresql.auto.conf", "a") as conf:  # (run in the data directory)
        conf.write("restore_command = 'test -e slept || { touch slept; sleep 12; }; false'\n")
    caplog.set_level(logging.WARNING, "router_backend.db")
    socket_dir = server.start()
    try:
        assert "still starting after the wheel's timeout" in caplog.text
        assert (pgdata / "slept").exists()
        answer = subprocess.run([embedded_program("psql"), "-h", socket_dir, "-U", "postgres",
                                 "-tAc", "SELECT 41 + 1", "postgres"], capture_output=True,
                                text=True, check=True)
        assert answer.stdout.strip() == "42"
    finally:
        server.stop()
    assert processes_on(pgdata) == []


def test_concurrent_migrations_apply_once(pg_server):
    location = pg_server.with_name(f"rb_race_{uuid.uuid4().hex[:8]}")
    ensure_database(location)
    with ThreadPoolExecutor(4) as pool:
        applied = list(pool.map(lambda _: apply_migrations(location), range(4)))
    everything = len(read_schema_migrations())
    assert sorted(map(len, applied)) == [0, 0, 0, everything]
    assert Sql(location).value("SELECT count(*) FROM _yoyo_migration") == everything
    execute_alone(pg_server, f'DROP DATABASE "{location.name}" WITH (FORCE)')


def test_a_failed_administrative_statement_carries_the_servers_warnings(pg_server):
    """As Citus's node functions report a worker's own error: in a warning before the
    error (the operator's `citus add-node` prints both)."""
    with pytest.raises(psycopg.errors.RaiseException) as raised:
        execute_alone(pg_server, "DO $$ BEGIN RAISE WARNING 'tuple concurrently updated' "
                                 "USING DETAIL = 'on the worker'; "
                                 "RAISE EXCEPTION 'failure on connection'; END $$")
    assert raised.value.__notes__ == ["WARNING: tuple concurrently updated (on the worker)"]
    assert execute_alone(pg_server, "SELECT 1 + 1") == [(2,)]


async def test_db_log_level_info_logs_statements_and_silent_logs_nothing(database, tmp_path,
                                                                          caplog):
    caplog.set_level(logging.DEBUG)
    async with open_database(settings_for(database, tmp_path, DB_LOG_LEVEL="info")) as db:
        await db.fetchone("SELECT 41 + 1")
    assert any("SELECT 41 + 1" in r.getMessage() for r in caplog.records if r.name == "router_backend.db")
    caplog.clear()
    async with open_database(settings_for(database, tmp_path, DB_LOG_LEVEL="silent")) as db:
        await db.fetchone("SELECT 41 + 1")
    assert not [r for r in caplog.records if r.name in ("psycopg", "router_backend.db")]


def test_dbshell_runs_psql_on_the_embedded_database(tmp_path):
    """With DB_HOST unset, `migrate` prepares the embedded database; dbshell starts (or
    joins) the embedded server, runs the wheel's own
    psql on the service's database, passes psql's arguments and exit status through, and the
    server is stopped when psql is done."""
    env = {**os.environ, "DATA_DIR": str(tmp_path)}
    env.pop("DB_HOST", None)
    migrated = subprocess.run([sys.executable, "-m", "ops.cli", "migrate"], env=env,
                              capture_output=True, text=True, timeout=120)
    assert migrated.returncode == 0, migrated.stderr
    # The first start says what it does in a few lines, not initdb's whole output (issue 26).
    assert "first start: creating the embedded PostgreSQL cluster" in migrated.stderr
    assert "initdb" not in migrated.stderr and len(migrated.stderr.splitlines()) <= 4
    result = subprocess.run([sys.executable, "-m", "ops.cli", "dbshell", "-A", "-t", "-c",
                             "SELECT count(*) FROM generation_queue"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    failed = subprocess.run([sys.executable, "-m", "ops.cli", "dbshell", "-c", "SELECT nope"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert failed.returncode != 0 and "nope" in failed.stderr
    assert processes_on(tmp_path / "postgres") == []


def test_dbshell_reaches_a_configured_server(settings, sql):
    """With DB_* set, dbshell runs the psql found on PATH against that server."""
    sql.rows("INSERT INTO routers (mac) VALUES ('aa:bb:cc:00:77:01')")
    env = command_env(settings, PATH=f"{Path(embedded_program('psql')).parent}:"
                                     f"{os.environ['PATH']}")
    result = subprocess.run([sys.executable, "-m", "ops.cli", "dbshell", "-A", "-t", "-c",
                             "SELECT mac FROM routers"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "aa:bb:cc:00:77:01"


def postmasters(pgdata: Path) -> list[psutil.Process]:
    return [process for process in psutil.process_iter(["name", "cmdline"])
            if process.info["name"] == "postgres" and process.info["cmdline"]
            and str(pgdata) in " ".join(process.info["cmdline"])]


@pytest.mark.drill  # embedded servers started, killed, adopted
def test_an_embedded_server_left_by_a_crash_is_adopted_and_stopped_with_its_last_user(
        tmp_path):
    """The service's process group SIGKILLed: its PostgreSQL (a session of its own) keeps
    running; the restarted service adopts it and, stopped cleanly, stops it (issue 33: it was
    left running for good, four postmasters after an afternoon of drills)."""
    pgdata = tmp_path / "postgres"
    server = ServerRunner(None, tmp_path, HTTP_WORKERS="2").start(timeout=120)
    try:
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait()
        left = postmasters(pgdata)
        assert len(left) == 1
        server.start(timeout=120)
        assert postmasters(pgdata) == left  # adopted, not a second one
        assert server.stop() == 0
        psutil.wait_procs(left, timeout=30)
        assert postmasters(pgdata) == []
    finally:  # nothing left running, whatever failed
        server.stop()
        for process in postmasters(pgdata):
            process.kill()


@pytest.mark.parametrize("first_start", [True, False])
def test_an_interrupted_start_leaves_no_server_running(tmp_path, monkeypatch, first_start):
    """Ctrl-C reaches `pg_ctl start` (the terminal's process group) but not the postmaster it
    launched (a session of its own): a start interrupted once the postmaster runs stops it,
    unless another process uses it. (CI, issue 53's submission: one postmaster left after a
    Ctrl-C at 2.5 s into a first start with two HTTP workers.)"""
    pgdata = tmp_path / "postgres"
    if not first_start:
        created = embedded.EmbeddedPostgres(pgdata)
        created.start()
        created.stop()
    real_open_server = embedded._open_server

    def open_then_interrupted(directory):
        real_open_server(directory)
        raise KeyboardInterrupt

    monkeypatch.setattr(embedded, "_open_server", open_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        embedded.EmbeddedPostgres(pgdata).start()
    assert postmasters(pgdata) == [] and postmasters(pgdata.with_name("postgres.creating")) == []
    monkeypatch.setattr(embedded, "_open_server", real_open_server)
    other_user = embedded.EmbeddedPostgres(pgdata)
    other_user.start()  # (a cluster left by the interrupted creation is made anew)
    try:
        monkeypatch.setattr(embedded, "_open_server", open_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            embedded.EmbeddedPostgres(pgdata).start()
        assert len(postmasters(pgdata)) == 1  # the other user's, still serving it
    finally:
        other_user.stop()
    assert postmasters(pgdata) == []
