"""Backups of the service's database with PostgreSQL's own tools, for `router-backend backup`
and `router-backend restore` (ops/backup.py).

A backup is `pg_dump` in its custom format: one consistent snapshot (one repeatable-read
transaction) taken while the service runs, its writes going on beside it. A restore is
`pg_restore` in one transaction into an empty database, then the migrations of this release
(a backup of an older release comes up to date like a database does at an upgrade).

With the embedded server, point-in-time recovery too: a base backup of the cluster
(`pg_basebackup`) and the WAL the server archives continuously (DB_WAL_ARCHIVE_DIR),
replayed into a new cluster up to a moment.

The programs are the server's own: with the embedded server, the wheel's, of its version;
with a configured server, those on PATH, refused with a clear line when older than the server
(pg_dump cannot read a server newer than itself).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tarfile
import time
from datetime import datetime
from pathlib import Path

from psycopg import sql

from server.db.connect import connect, execute_alone
from server.db.embedded import EmbeddedPostgres, admin_cursor, embedded_program
from server.db.location import DatabaseLocation
from server.db.migrate import database_exists


class BackupError(OSError):
    """A backup or restore could not be made; the message says why and what to do."""


def program(name: str, embedded: bool, location: DatabaseLocation) -> str:
    """The path of pg_dump or pg_restore to use against `location`."""
    if embedded:
        return embedded_program(name)
    path = shutil.which(name)
    if path is None:
        raise BackupError(f"{name} not found on PATH: install PostgreSQL's client programs "
                          "(Debian: postgresql-client) of the server's version or newer")
    own = _major(subprocess.run([path, "--version"], capture_output=True, text=True,
                                check=True).stdout)
    server = server_major(location)
    if own < server:
        raise BackupError(f"{path} is of PostgreSQL {own}, the server of {server}: install the "
                          f"client programs of {server} or newer (postgresql-client-{server})")
    return path


def server_major(location: DatabaseLocation) -> int:
    return execute_alone(location.with_name("postgres"),
                         "SELECT current_setting('server_version_num')::int / 10000")[0][0]


def _major(version_line: str) -> int:
    match = re.search(r"(\d+)(?:\.\d+)?", version_line)
    if match is None:
        raise BackupError(f"cannot read a PostgreSQL version in {version_line!r}")
    return int(match.group(1))


def _environment(location: DatabaseLocation) -> dict[str, str]:
    """libpq's variables for the client programs (the password never on a command line)."""
    return {**os.environ, "PGHOST": location.host, "PGPORT": str(location.port),
            "PGUSER": location.user, "PGDATABASE": location.name,
            "PGSSLMODE": location.sslmode, "PGPASSWORD": location.password}


def dump(location: DatabaseLocation, pg_dump: str, target: Path) -> None:
    """A consistent backup of the database into `target`, written aside and renamed into place
    once complete and on disk, so `target` is never a partial backup."""
    private_folder(target.parent)
    partial = target.with_name(target.name + ".partial")
    # Created 0600 before pg_dump opens it (it keeps the mode): raw telemetry, notifications
    # and key hashes are readable by the service's user alone.
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    result = subprocess.run([pg_dump, "--format=custom", "--no-owner", f"--file={partial}"],
                            env=_environment(location), capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BackupError(f"pg_dump failed: {result.stderr.strip()}")
    with open(partial, "rb") as written:
        os.fsync(written.fileno())
    partial.rename(target)


def database_has_tables(location: DatabaseLocation) -> bool:
    """Whether the database exists and holds any table."""
    if not database_exists(location):
        return False
    conn = connect(location)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = "
                        "current_schema())")
            return cur.fetchone()[0]
    finally:
        conn.close()


def recreate_database(location: DatabaseLocation) -> None:
    """Drop the database (ending its sessions) and create it empty."""
    conn = connect(location.with_name("postgres"), autocommit=True)
    try:
        with conn.cursor() as cur:
            name = sql.Identifier(location.name)
            cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
            cur.execute(sql.SQL("CREATE DATABASE {}").format(name))
    finally:
        conn.close()


def load(location: DatabaseLocation, pg_restore: str, source: Path) -> None:
    """Restore a backup into the (empty) database, in one transaction: all of it or nothing."""
    result = subprocess.run([pg_restore, "--single-transaction", "--exit-on-error",
                             "--no-owner", f"--dbname={location.name}", str(source)],
                            env=_environment(location), capture_output=True, text=True)
    if result.returncode != 0:
        raise BackupError(f"pg_restore failed, nothing restored: {result.stderr.strip()}")


# Point-in-time recovery of the embedded server: a base backup (pg_basebackup) and the WAL
# archived since (DB_WAL_ARCHIVE_DIR) replayed up to a moment.

RECOVERY_WAIT_SECONDS = 3600
RECOVERY_SETTINGS = ("restore_command", "recovery_target_time", "recovery_target_action")


def base_backup(location: DatabaseLocation, pg_basebackup: str, target: Path) -> None:
    """A base backup of the whole embedded cluster into the directory `target` (base.tar.gz
    and the WAL it needs, pg_wal.tar.gz), made aside and renamed into place once complete."""
    private_folder(target.parent)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    result = subprocess.run([pg_basebackup, f"--pgdata={partial}", "--format=tar", "--gzip",
                             "--wal-method=stream", "--checkpoint=fast"],
                            env=_environment(location), capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise BackupError(f"pg_basebackup failed: {result.stderr.strip()}")
    partial.chmod(0o700)
    for member in partial.iterdir():
        member.chmod(0o600)
    partial.rename(target)


def private_folder(folder: Path) -> None:
    """`folder` made, readable by the service's user alone (0700), when missing; an existing
    one is the operator's and left as it is (the backups in it are private themselves)."""
    if not folder.is_dir():
        folder.mkdir(parents=True)
        folder.chmod(0o700)


def recover(embedded: EmbeddedPostgres, backup: Path, archive: Path,
            until: datetime | None) -> str:
    """Make `embedded`'s (new) cluster the base backup's, replay the archived WAL up to
    `until` (or all of it), and open it for writing; returns the socket directory."""
    for member in ("base.tar.gz", "pg_wal.tar.gz"):
        if not (backup / member).is_file():
            raise BackupError(f"{backup} is no base backup (no {member}): make one with "
                              "`router-backend backup --base`")
    embedded.start()  # a new cluster: its owner, as the wheel made it
    embedded.stop()
    pgdata, owner = embedded.pgdata, embedded.pgdata.stat()
    for child in pgdata.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    # The data filter: no member is written outside the folder, through a link, or as a
    # device, whatever the archive holds.
    try:
        with tarfile.open(backup / "base.tar.gz") as tar:
            tar.extractall(pgdata, filter="data")
        with tarfile.open(backup / "pg_wal.tar.gz") as tar:
            tar.extractall(pgdata / "pg_wal", filter="data")
    except tarfile.FilterError as error:
        raise BackupError(f"{backup} holds a member that would land outside the data "
                          f"folder ({error}): not restored") from None
    # The socket's lock of the server that was backed up (its socket is in its data
    # folder): left in, the recovered server would refuse to start while that one runs.
    for stale in [*pgdata.glob(".s.PGSQL.*"), pgdata / "postmaster.pid"]:
        stale.unlink(missing_ok=True)
    pgdata.chmod(0o700)
    (pgdata / "recovery.signal").touch()
    target = {"restore_command": f"cp {shlex.quote(str(archive))}/%f %p",
              "recovery_target_action": "promote"}
    if until is not None:
        target["recovery_target_time"] = until.isoformat()
    with open(pgdata / "postgresql.auto.conf", "a") as conf:
        for name, value in target.items():
            conf.write(f"{name} = '{value}'\n")
    for path in [pgdata, *pgdata.rglob("*")]:
        os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
    socket_dir = embedded.start()
    _wait_out_of_recovery(socket_dir)
    return socket_dir


def _wait_out_of_recovery(socket_dir: str) -> None:
    """Until the server has replayed what it was asked and been promoted (it accepts
    read-only connections before that); then its recovery settings are removed."""
    deadline = time.monotonic() + RECOVERY_WAIT_SECONDS
    with admin_cursor(socket_dir) as cur:
        while True:
            cur.execute("SELECT pg_is_in_recovery()")
            if not cur.fetchone()[0]:
                break
            if time.monotonic() > deadline:
                raise BackupError(f"still recovering after {RECOVERY_WAIT_SECONDS} s")
            time.sleep(0.5)
        for name in RECOVERY_SETTINGS:
            cur.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
        cur.execute("SELECT pg_reload_conf()")
