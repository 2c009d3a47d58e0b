"""What the benchmarks share: a throw-away migrated database (embedded, or the server named by
DB_HOST/DB_PORT/DB_USER/DB_PASSWORD) and the real server run as a child process."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import psycopg2

from server.db.embedded import EmbeddedPostgres
from server.db.location import DatabaseLocation
from server.db.migrate import apply_migrations, ensure_database


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def bench_database() -> Iterator[tuple[DatabaseLocation, Path]]:
    """A new, migrated database and a work directory; both removed afterwards."""
    with tempfile.TemporaryDirectory() as workdir_name:
        workdir = Path(workdir_name)
        name = f"bench_{uuid.uuid4().hex[:8]}"
        embedded = None
        if os.environ.get("DB_HOST"):
            location = DatabaseLocation(
                os.environ["DB_HOST"], int(os.environ.get("DB_PORT", "5432")), name,
                os.environ.get("DB_USER", "postgres"), os.environ.get("DB_PASSWORD", ""),
                "prefer")
        else:
            embedded = EmbeddedPostgres(workdir / "pgdata")
            location = DatabaseLocation(embedded.start(), 5432, name, "postgres", "", "disable")
        try:
            ensure_database(location)
            apply_migrations(location)
            yield location, workdir
        finally:
            _drop_database(location)
            if embedded is not None:
                embedded.stop()


@contextlib.contextmanager
def running_server(location: DatabaseLocation, data_dir: Path,
                   **settings: str) -> Iterator[tuple[subprocess.Popen, int]]:
    """`python -m ops.cli serve` on a free port; yields (process, port), stops it after."""
    port = free_port()
    env = {**os.environ, "DB_HOST": location.host, "DB_PORT": str(location.port),
           "DB_NAME": location.name, "DB_USER": location.user,
           "DB_PASSWORD": location.password, "DATA_DIR": str(data_dir),
           "LISTEN_PORT": str(port), "DB_LOG_LEVEL": "error", **settings}
    log_path = data_dir / "server.log"  # a file: an unread pipe would fill and stall the server
    with log_path.open("ab") as log:
        server = subprocess.Popen([sys.executable, "-m", "ops.cli", "serve"], env=env,
                                  stdout=log, stderr=log)
    try:
        _wait_listening(server, port, log_path)
        yield server, port
    finally:
        server.terminate()
        server.wait(30)


def _wait_listening(server: subprocess.Popen, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if server.poll() is not None:
                raise RuntimeError(log_path.read_text()[-2000:])
            time.sleep(0.2)
    raise RuntimeError("server did not start")


def _drop_database(location: DatabaseLocation) -> None:
    conn = psycopg2.connect(**location.with_name("postgres").connect_kwargs())
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{location.name}" WITH (FORCE)')
    finally:
        conn.close()
