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


def wait_listening(process: subprocess.Popen, port: int, timeout: float = 60) -> bool:
    """Wait until something listens on the loopback port; False if `process` exited first or
    the time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            if process.poll() is not None:
                return False
            time.sleep(0.05)
    return False


class ServerRunner:
    """`python -m ops.cli serve` as a child process on a free port, which a drill can kill,
    stop and start again on the same port."""

    def __init__(self, location: DatabaseLocation, data_dir: Path, **settings: str):
        self.port = free_port()
        self.env = {**os.environ, "DB_HOST": location.host, "DB_PORT": str(location.port),
                    "DB_NAME": location.name, "DB_USER": location.user,
                    "DB_PASSWORD": location.password, "DB_SSLMODE": location.sslmode,
                    "DATA_DIR": str(data_dir), "LISTEN_PORT": str(self.port),
                    "DB_LOG_LEVEL": "error", **settings}
        # A file: an unread pipe would fill and stall the server.
        self.log_path = data_dir / f"server-{self.port}.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> "ServerRunner":
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "ops.cli", "serve"],
                                            env=self.env, stdout=log, stderr=log)
        if not wait_listening(self.process, self.port, timeout):
            raise RuntimeError(f"server did not start listening: {self.log_tail()}")
        return self

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then wait for the graceful exit; returns the exit status."""
        if self.process is None:
            return 0
        self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise RuntimeError(f"server ignored SIGTERM for {timeout}s") from None

    def memory_kib(self, field: str) -> int:
        """VmRSS (current) or VmHWM (peak) resident memory of the server process."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def log_tail(self, characters: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]


@contextlib.contextmanager
def running_server(location: DatabaseLocation, data_dir: Path,
                   **settings: str) -> Iterator[ServerRunner]:
    """A started ServerRunner, stopped afterwards."""
    runner = ServerRunner(location, data_dir, **settings).start()
    try:
        yield runner
    finally:
        runner.stop()


def fetch_value(location: DatabaseLocation, statement: str, params=None):
    """The first column of the first row, read with a connection of its own (what the
    benchmarks and drills check, independently of the service's code)."""
    conn = psycopg2.connect(**location.connect_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchone()[0]
    finally:
        conn.close()


CORPUS_RULES = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "et-open-2020"


def publish_corpus_ruleset(location: DatabaseLocation, workdir: Path) -> dict[str, str]:
    """Publish the ET Open corpus archive with the real `rulepreprocess` command; returns the
    settings under which a server generates from it."""
    settings = {"RULE_DATA_DIR": str(workdir / "rules"),
                "RULE_PREPROCESS_ARCHIVE_URL": (CORPUS_RULES / "emerging.rules.zip").as_uri(),
                "RULE_PREPROCESS_VERSION_URL": (CORPUS_RULES / "version.txt").as_uri()}
    env = {**ServerRunner(location, workdir).env, **settings}
    result = subprocess.run([sys.executable, "-m", "ops.rulepreprocess"], env=env,
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"rulepreprocess failed: {result.stderr}")
    return settings


def _drop_database(location: DatabaseLocation) -> None:
    conn = psycopg2.connect(**location.with_name("postgres").connect_kwargs())
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{location.name}" WITH (FORCE)')
    finally:
        conn.close()
