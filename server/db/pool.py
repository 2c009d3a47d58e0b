"""The connection pool (psycopg_pool) and the one place that turns connectivity failures
into `DatabaseUnavailable` (answered 503 with Retry-After by the error middleware).

Queries are SQL text with `%s` / `%(name)s` parameters, bound on the client
(server/db/connect.py). Every statement waits at most DB_TIMEOUT_SECONDS: a network cut
delivers nothing and closes nothing, so only a timer on this side ends the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import time
from typing import Any, AsyncIterator

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from server.db.connect import adapt, connect_async
from server.db.location import DatabaseLocation
from server.db.rows import RowsInsert

log = logging.getLogger("router_backend.db")

CONNECTIVITY_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError,
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

# How long the pool retries a connection that failed (with its backoff: 1 s, then 2, 4 ...)
# before it gives up, so that the next request asks for one at once: with the pool's default
# (5 minutes) a database back after a 5 s outage was served again 8 to 12 s later.
RECONNECT_SECONDS = 1.0
# Once the database was found unreachable, how long a request waits for a connection before
# its 503, until one is had again: without it every request waited the pool's whole timeout
# (DB_TIMEOUT_SECONDS) while the server was down, and a health probe saw a hang.
UNREACHABLE_WAIT_SECONDS = 1.0

# How long a statement may take before its wait ends: set by Database.open (the same
# DB_TIMEOUT_SECONDS for every pool of a process).
_statement_seconds: float | None = None


class DatabaseUnavailable(Exception):
    """The database cannot be reached now; the request is safe to retry later."""

    stored_unknown = False  # see server.db.telemetry.StoredUnknown


class Database:
    """A psycopg pool plus connectivity-error handling. One per process."""

    def __init__(self, location: DatabaseLocation, minsize: int, maxsize: int,
                 timeout: float):
        self.location = location
        self.timeout = timeout
        # The last connection asked for could not be had, or was lost: set also by the change
        # feed's LISTEN connection, which checks the server every few seconds when idle.
        self.unreachable = False
        self.pool = AsyncConnectionPool(
            location.dsn(), min_size=minsize, max_size=max(minsize, maxsize), timeout=timeout,
            open=False, configure=_configure, check=_check, name="router_backend",
            reconnect_timeout=RECONNECT_SECONDS,
            reconnect_failed=self._reconnect_failed,
            kwargs={"autocommit": True, "cursor_factory": psycopg.AsyncClientCursor,
                    "connect_timeout": max(1, round(timeout))})

    @classmethod
    async def open(cls, location: DatabaseLocation, minsize: int, maxsize: int,
                   timeout: float) -> "Database":
        """`minsize` connections opened before this returns. Every statement is logged
        when the logger `router_backend.db` is at INFO (DB_LOG_LEVEL=info)."""
        global _statement_seconds
        _statement_seconds = timeout
        database = cls(location, minsize, maxsize, timeout)
        try:
            await database.pool.open(wait=minsize > 0, timeout=timeout)
        except BaseException:
            await database.pool.close()
            raise
        return database

    async def close(self) -> None:
        await self.pool.close()

    async def _reconnect_failed(self, pool: AsyncConnectionPool) -> None:
        """The pool gave up a connection attempt (RECONNECT_SECONDS): later requests wait
        briefly, and requests already waiting get another attempt. The pool tries again
        only when a request comes, so without it those waiting, once no more requests came
        (every router of a server process waiting on it), waited DB_TIMEOUT_SECONDS
        although the database was back a second later (the postmaster drill, in CI)."""
        self.unreachable = True
        if pool.get_stats()["requests_waiting"]:
            await pool.check()  # one more attempt, itself retried for RECONNECT_SECONDS

    @contextlib.asynccontextmanager
    async def cursor(self) -> AsyncIterator[psycopg.AsyncCursor]:
        """A cursor in autocommit mode, on a connection the pool has just checked (`_check`:
        one the server closed meanwhile, by a restart or a termination, is replaced, not
        handed out). A connection whose statement lost the server or a Citus worker is
        closed, so the pool discards it; one left in a transaction is rolled back."""
        try:
            conn = await self._connection()
            try:
                async with conn:  # as the pool's own connection(): rolled back if left open
                    try:
                        async with conn.cursor() as cur:
                            yield cur
                    except Exception as error:  # a statement's timeout is asyncio's
                        if isinstance(error, CONNECTIVITY_ERRORS) or worker_away(error):
                            # Never handed out again: a commit in doubt ends this session
                            # (server/db/telemetry.py), which would fail the next holder's
                            # statement (a router on a sound worker, in the Citus drill).
                            await conn.close()
                        raise
            finally:
                await self.pool.putconn(conn)
        except CONNECTIVITY_ERRORS as error:
            # A connection refused or lost; not a statement that ran out of time, nor a
            # pool whose connections were all busy (the database may only be busy): under
            # load, marking those unreachable renewed the brief wait and its 503s for as
            # long as the load lasted (the red team's postmaster restart).
            if not isinstance(error, (asyncio.TimeoutError, PoolTimeout)):
                self.unreachable = True
            raise DatabaseUnavailable(_describe(error)) from error
        except psycopg.Error as error:
            if worker_away(error):
                raise DatabaseUnavailable(_describe(error)) from error
            raise

    async def _connection(self) -> psycopg.AsyncConnection:
        """A connection of the pool: waited for UNREACHABLE_WAIT_SECONDS while the database
        is known unreachable, else up to the pool's timeout; a request whose brief wait ran
        out after the database was found again (another request had a connection) waits on
        as any request would."""
        deadline = time.monotonic() + self.timeout
        while True:
            brief = self.unreachable
            left = deadline - time.monotonic()
            try:
                conn = await self.pool.getconn(
                    timeout=min(UNREACHABLE_WAIT_SECONDS, left) if brief else left)
            except PoolTimeout:
                if brief and not self.unreachable and time.monotonic() < deadline:
                    continue
                raise
            self.unreachable = False
            return conn

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[psycopg.AsyncCursor]:
        """A cursor on a connection of its own, outside the pool, for session state held
        while its holder's statements take pool connections (a job's advisory lock, LISTEN):
        jobs holding pool connections idle while they wait for more starved the pool, and
        requests with it. Connectivity failures, at connect or later, are DatabaseUnavailable
        as from `cursor`."""
        try:
            conn = await asyncio.wait_for(connect_async(self.location, self.timeout),
                                          self.timeout)
            async with conn, conn.cursor() as cur:
                yield cur
        except CONNECTIVITY_ERRORS as error:
            raise DatabaseUnavailable(_describe(error)) from error

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncCursor]:
        """BEGIN ... COMMIT; any exception rolls back (the pool discards a connection that
        cannot)."""
        async with self.cursor() as cur:
            async with cur.connection.transaction():
                yield cur

    async def fetchone(self, query: str, params: Any = None) -> tuple | None:
        async with self.cursor() as cur:
            await execute(cur, query, params)
            return await cur.fetchone()

    async def fetchrow(self, query: str, params: Any = None) -> tuple:
        """The row of a statement that always returns one (an aggregate; an INSERT's
        RETURNING)."""
        row = await self.fetchone(query, params)
        if row is None:
            raise LookupError("a statement that returns one row returned none")
        return row

    async def fetchall(self, query: str, params: Any = None) -> list[tuple]:
        async with self.cursor() as cur:
            await execute(cur, query, params)
            return await cur.fetchall()

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator["Reads"]:
        """Reads of one moment: a READ ONLY, REPEATABLE READ transaction (a hunt reads the
        index's blocks and its rows, which the packing job moves from one to the other)."""
        async with self.cursor() as cur:
            conn = cur.connection
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            await conn.set_read_only(True)
            try:
                async with conn.transaction():
                    yield Reads(cur)
            finally:
                await conn.set_isolation_level(None)
                await conn.set_read_only(None)

    async def execute(self, query: str | RowsInsert, params: Any = None) -> int:
        async with self.cursor() as cur:
            await execute(cur, query, params)
            return cur.rowcount

    def connection_counts(self) -> tuple[int, int, int]:
        """The pool's connections: open, idle and the most it may open."""
        stats = self.pool.get_stats()
        return stats["pool_size"], stats["pool_available"], stats["pool_max"]


class Reads:
    """Reads on one cursor (Database.snapshot)."""

    def __init__(self, cur: psycopg.AsyncCursor) -> None:
        self.cur = cur

    async def fetchall(self, query: str, params: Any = None) -> list[tuple]:
        await execute(self.cur, query, params)
        return await self.cur.fetchall()

    async def fetchall_binary(self, query: str, params: Any = None) -> list[tuple]:
        """Rows in PostgreSQL's binary format, parameters bound by the server: a `bytea`
        comes as its bytes, not as twice as many hex digits to parse (the packed hunt
        index's blocks: half the time of a text read)."""
        binary = psycopg.AsyncCursor(self.cur.connection)
        async with asyncio.timeout(_statement_seconds):
            await binary.execute(query, params, binary=True)
        return await binary.fetchall()


async def execute(cur: psycopg.AsyncCursor, query: str | RowsInsert, params: Any = None
                  ) -> None:
    """One statement, or several in one text; the cursor then holds the last one's rows
    and row count. A RowsInsert is bound on this cursor (it has its values)."""
    if isinstance(query, RowsInsert):
        query = query.text(cur)
    if log.isEnabledFor(logging.INFO):
        log.info("SQL %s", query[:500])
    async with asyncio.timeout(_statement_seconds):
        await cur.execute(query, params)
    while cur.nextset():
        pass


async def _configure(conn: psycopg.AsyncConnection) -> None:
    adapt(conn)


async def _check(conn: psycopg.AsyncConnection) -> None:
    """The pool's check before it hands a connection out, without a round trip (the pool's
    own check_connection costs one per statement: 0.6x the requests a second on a read).
    An idle connection of the pool (none LISTENs) has nothing to read unless the server is
    ending it (a restart, a termination), so one with anything to read is closed, and the
    pool replaces it. Reading the server's last message alone left the connection's status
    OK until the end of the stream arrived: a terminated connection was handed out and its
    statement answered 503 (the red team's postmaster restart). poll, not select: select
    refuses a descriptor numbered 1024 or more (a process holding a thousand client
    connections threw away every connection it opened after them)."""
    readable = select.poll()
    readable.register(conn.fileno(), select.POLLIN)
    if readable.poll(0):
        await conn.close()  # else the pool keeps it, and hands it out again
        raise psycopg.OperationalError("the server sent an idle connection a message: "
                                       "it is ending it")


def worker_away(error: BaseException) -> bool:
    return (isinstance(error, psycopg.InternalError)
            and any(message in str(error) for message in WORKER_AWAY_MESSAGES))


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
