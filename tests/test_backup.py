"""`router-backend backup` and `restore` as an operator runs them: on the embedded server with
its own programs, on a configured server with those on PATH (refused with one clear line when
older than the server), never over a service that runs or a database that holds data unless
told to. The drill (tests/test_drills.py) restores under load."""

from __future__ import annotations

import pytest

import io
import shutil
import tarfile
import subprocess

from ops.pg_backup import server_major
from testkit.database import Sql, command_env
from testkit.server import ServerRunner, embedded_env
from tests.commands import router_backend

MAC = "aa:bb:cc:00:43:02"


def test_restore_refuses_a_running_service_and_a_database_with_data(tmp_path):
    server = ServerRunner(None, tmp_path).start(timeout=120)
    env = embedded_env(tmp_path)
    try:
        made = router_backend(env, "backup", "--output", str(tmp_path / "b.dump"))
        assert made.returncode == 0, made.stderr
        assert made.stdout.startswith(f"router-backend backup: {tmp_path / 'b.dump'} (")
        refused = router_backend(env, "restore", str(tmp_path / "b.dump"))
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines() == [
            f"router-backend: another service (pid {server.process.pid}, listening on "
            f"127.0.0.1:{server.port}) runs on DATA_DIR {tmp_path.resolve()}: stop it first, "
            "or give this one a DATA_DIR of its own"]
    finally:
        server.stop()
    refused = router_backend(env, "restore", str(tmp_path / "b.dump"))
    assert refused.returncode == 1 and "is not empty" in refused.stderr
    assert "--replace" in refused.stderr
    replaced = router_backend(env, "restore", "--replace", str(tmp_path / "b.dump"))
    assert replaced.returncode == 0, replaced.stderr
    missing = router_backend(env, "restore", str(tmp_path / "nothing.dump"))
    assert missing.returncode == 1 and "no such backup file" in missing.stderr


def test_backup_and_restore_on_a_configured_server(database, settings, tmp_path):
    """The suite's server (DB_HOST set): pg_dump from PATH when it is as new as the server;
    else one line naming the client to install."""
    Sql(database).rows("INSERT INTO routers (mac) VALUES (%s)", (MAC,))
    env = command_env(settings)
    made = router_backend(env, "backup", "--output", str(tmp_path / "b.dump"))
    pg_dump = shutil.which("pg_dump")
    client = int(subprocess.run([pg_dump, "--version"], capture_output=True, text=True)
                 .stdout.split()[2].split(".")[0]) if pg_dump else 0
    server = server_major(database)
    if client < server:
        assert made.returncode == 1
        assert f"the server of {server}: install the client programs of {server}" in \
            made.stderr or "not found on PATH" in made.stderr
        return
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "b.dump").stat().st_mode & 0o777 == 0o600  # issue 50: raw telemetry
    Sql(database).rows("DELETE FROM routers")
    refused = router_backend(env, "restore", str(tmp_path / "b.dump"))
    assert refused.returncode == 1 and "is not empty" in refused.stderr
    restored = router_backend(env, "restore", "--replace", str(tmp_path / "b.dump"))
    assert restored.returncode == 0, restored.stderr
    assert Sql(database).rows("SELECT mac::text FROM routers") == [(MAC,)]


@pytest.mark.drill  # two embedded servers and a service
def test_point_in_time_recovery_of_the_embedded_server(tmp_path):
    """DB_WAL_ARCHIVE_DIR archives the WAL; `backup --base`, then rows written before and
    after a moment; `restore --base --until` that moment into a new DATA_DIR has the first
    and not the second, and serves; the original DATA_DIR is refused without --replace."""
    archive = tmp_path / "wal"
    source = {**embedded_env(tmp_path / "source"), "DB_WAL_ARCHIVE_DIR": str(archive)}
    assert router_backend(source, "migrate").returncode == 0

    def psql(env, statement: str) -> str:
        result = router_backend(env, "dbshell", "-tAc", statement)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert psql(source, "SHOW archive_mode").strip() == "on"
    psql(source, "INSERT INTO routers (mac) VALUES ('aa:bb:cc:00:43:10')")
    made = router_backend(source, "backup", "--base", "--output", str(tmp_path / "base"))
    assert made.returncode == 0, made.stderr
    assert tmp_path.joinpath("base").stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in tmp_path.joinpath("base").iterdir()} == {0o600}
    psql(source, "INSERT INTO routers (mac) VALUES ('aa:bb:cc:00:43:11')")
    moment = psql(source, "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', "
                          "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')").strip()
    psql(source, "INSERT INTO routers (mac) VALUES ('aa:bb:cc:00:43:12')")
    psql(source, "SELECT pg_switch_wal()")  # (archive_timeout would within a minute)

    refused = router_backend(source, "restore", "--base", str(tmp_path / "base"))
    assert refused.returncode == 1 and "--replace" in refused.stderr
    target = {**embedded_env(tmp_path / "target"), "DB_WAL_ARCHIVE_DIR": str(archive)}
    # Beside the running service (issue 50: the backup carried its socket's lock file).
    running = ServerRunner(None, tmp_path / "source", DB_WAL_ARCHIVE_DIR=str(archive)).start(
        timeout=120)
    try:
        restored = router_backend(target, "restore", "--base", str(tmp_path / "base"),
                                  "--until", moment)
    finally:
        assert running.stop() == 0
    assert restored.returncode == 0, restored.stderr
    assert psql(target, "SELECT mac FROM routers ORDER BY mac").split() == [
        "aa:bb:cc:00:43:10", "aa:bb:cc:00:43:11"]
    assert psql(target, "SHOW restore_command").strip() == ""
    server = ServerRunner(None, tmp_path / "target").start(timeout=120)
    assert server.stop() == 0


def test_a_base_backup_with_a_link_out_of_the_data_folder_is_refused(tmp_path):
    """Issue 50: `restore --base` (root, changing owners) never follows a link in the
    archive."""
    base = tmp_path / "base"
    base.mkdir()
    with tarfile.open(base / "base.tar.gz", "w:gz") as tar:
        link = tarfile.TarInfo("global")
        link.type, link.linkname = tarfile.SYMTYPE, str(tmp_path / "outside")
        tar.addfile(link)
        member = tarfile.TarInfo("global/pg_control")
        member.size = 4
        tar.addfile(member, io.BytesIO(b"evil"))
    with tarfile.open(base / "pg_wal.tar.gz", "w:gz"):
        pass
    target = {**embedded_env(tmp_path / "target"), "DB_WAL_ARCHIVE_DIR": str(tmp_path / "wal")}
    refused = router_backend(target, "restore", "--base", str(base))
    assert refused.returncode == 1 and "outside the data folder" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "outside").exists()
