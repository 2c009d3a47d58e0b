"""The aiopg connection pool and the one place that turns connectivity failures into
`DatabaseUnavailable` (answered 503 with Retry-After by the error middleware).

Queries are SQL text with psycopg2's parameters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, AsyncIterator

import aiopg
import psycopg2

from server.db.location import DatabaseLocation

log = logging.getLogger("router_backend.db")

CONNECTIVITY_ERRORS = (psycopg2.OperationalError, psycopg2.InterfaceError,
                       asyncio.TimeoutError, ConnectionError)


# Under Citus (docs/scaling.md), a worker node that stops while a statement needs it is
# reported by the coordinator, whose connection stays sound, as an internal error (XX000)
# naming the lost connection: the router's shard is away for now, retry later. Citus's own
# messages are never translated; the last two are PostgreSQL's, relayed from the worker.
WORKER_AWAY_MESSAGES = ("failure on connection marked as essential",
                        "connection to the remote node",
                        "could not establish any connections to the node",
                        "terminating connection due to administrator command",
                        "the database system is shutting down")

ACQUIRE_ATTEMPTS = 5

# Values come back as psycopg2 gives them (json as text, no hstore or uuid set-up per connection).
CONNECTION_OPTIONS = {"enable_hstore": False, "enable_json": False, "enable_uuid": False}


class DatabaseUnavailable(Exception):
    """The database cannot be reached now; the request is safe to retry later."""

    stored_unknown = False  # see server.db.telemetry.StoredUnknown


class Database:
    """An aiopg pool plus connectivity-error handling. One per process."""

    def __init__(self, pool: aiopg.Pool, location: DatabaseLocation):
        self.pool = pool
        self.location = location

    @classmethod
    async def open(cls, location: DatabaseLocation, minsize: int, maxsize: int,
                   timeout: float, echo: bool = False) -> "Database":
        """`echo`: aiopg logs every statement (logger `aiopg`, level INFO)."""
        pool = await aiopg.create_pool(location.dsn(), minsize=minsize, maxsize=maxsize,
                                       timeout=timeout, echo=echo, **CONNECTION_OPTIONS)
        return cls(pool, location)

    async def close(self) -> None:
        self.pool.close()
        await self.pool.wait_closed()

    async def _acquire(self) -> aiopg.Connection:
        """A connection from the pool. aiopg (1.4) checks its idle connections, may then
        await a new one (below DB_POOL_MIN), and hands out the first idle one asserting it is
        still open: one the server closed meanwhile (connections terminated, a restart) fails
        that assertion, already out of the pool. The fault drill saw 25 answers 500 from it;
        asking again gets a sound connection or a new one."""
        for _ in range(ACQUIRE_ATTEMPTS):
            try:
                return await self.pool.acquire()
            except AssertionError:
                continue
            except CONNECTIVITY_ERRORS as error:
                raise DatabaseUnavailable(_describe(error)) from error
        raise DatabaseUnavailable("the pool's connections keep closing")

    @contextlib.asynccontextmanager
    async def cursor(self) -> AsyncIterator[aiopg.Cursor]:
        """A cursor in autocommit mode. A broken connection is discarded, never reused."""
        conn = await self._acquire()
        try:
            async with conn.cursor() as cur:
                yield cur
        except CONNECTIVITY_ERRORS as error:
            conn.close()
            await self.pool.clear()  # idle connections to a server that went away are dead too
            raise DatabaseUnavailable(_describe(error)) from error
        except BaseException as error:
            if not conn.closed and _in_transaction(conn):
                conn.close()
            if worker_away(error):
                raise DatabaseUnavailable(_describe(error)) from error
            raise
        finally:
            await self.pool.release(conn)

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[aiopg.Cursor]:
        """A cursor on a connection of its own, outside the pool, for session state held
        while its holder's statements take pool connections (a job's advisory lock): jobs
        holding pool connections idle while they wait for more starved the pool, and
        requests with it. Connectivity failures, at connect or later, are DatabaseUnavailable
        as from `cursor`."""
        try:
            conn = await aiopg.connect(self.location.dsn(), timeout=self.pool.timeout,
                                       **CONNECTION_OPTIONS)
            async with conn, conn.cursor() as cur:
                yield cur
        except CONNECTIVITY_ERRORS as error:
            raise DatabaseUnavailable(_describe(error)) from error

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiopg.Cursor]:
        """BEGIN ... COMMIT; any exception rolls back (by closing the connection if need be)."""
        async with self.cursor() as cur:
            await cur.execute("BEGIN")
            try:
                yield cur
            except BaseException:
                with contextlib.suppress(*CONNECTIVITY_ERRORS, psycopg2.Error):
                    await cur.execute("ROLLBACK")
                raise
            await cur.execute("COMMIT")

    async def fetchone(self, query: str, params: Any = None) -> tuple | None:
        async with self.cursor() as cur:
            await execute(cur, query, params)
            return await cur.fetchone()

    async def fetchall(self, query: str, params: Any = None) -> list[tuple]:
        async with self.cursor() as cur:
            await execute(cur, query, params)
            return await cur.fetchall()

    async def execute(self, query: str, params: Any = None) -> int:
        async with self.cursor() as cur:
            await execute(cur, query, params)
            return cur.rowcount


async def execute(cur: aiopg.Cursor, query: str, params: Any = None) -> None:
    if log.isEnabledFor(logging.INFO):
        log.info("SQL %s", query[:500])
    await cur.execute(query, params)


def worker_away(error: BaseException) -> bool:
    return (isinstance(error, psycopg2.InternalError)
            and any(message in str(error) for message in WORKER_AWAY_MESSAGES))


def _in_transaction(conn: aiopg.Connection) -> bool:
    return conn.raw.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
