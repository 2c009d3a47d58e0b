"""Batched, transactional inserts of telemetry rows while a request body streams in.

Rows arrive as JSON arrays `[column values..., record]` (see server/ingest/extract.py) and
are sent to PostgreSQL as one JSON document per batch, unpacked server-side by
`jsonb_array_elements`. aiopg cannot use COPY (psycopg2 has no COPY in async mode); this keeps
one round trip and one parameter per batch instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

import aiopg
import sqlalchemy as sa

from server.db.pool import DIALECT, Database, DatabaseUnavailable, execute
from server.db.upload_keys import INSERT_KEY, UploadKey

BATCH_BYTES = 2 * 1024 * 1024  # each batch is held ~4 times over (rows, joined, str, query)


class CommitInDoubt(Exception):
    """The connection failed while the request's last write (a single batch) or its COMMIT
    was under way: the rows may or may not be stored. `backend_pid`: the PostgreSQL process
    that held the write (see was_committed)."""

    def __init__(self, backend_pid: int, reason: str):
        super().__init__(reason)
        self.backend_pid = backend_pid


class KeyAlreadyUsed(Exception):
    """The upload's Idempotency-Key was recorded by an earlier upload: nothing was stored."""


class StoredUnknown(DatabaseUnavailable):
    """Answered 503 with `"stored": "unknown"`: after CommitInDoubt the database could not be
    asked whether the rows were stored."""

    stored_unknown = True


# pg_terminate_backend(pid, timeout) waits for the process to end (PostgreSQL 14+).
_END_BACKEND = ("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE pid = %(pid)s AND usename = current_user")
_STORED_ROWS = "SELECT count(*) FROM {table} WHERE mac = %(mac)s AND received_at = %(at)s"


async def was_committed(db: Database, table: str, mac: str, received_at: datetime,
                        doubt: CommitInDoubt, rows: int) -> bool:
    """Settle a CommitInDoubt: end the backend that held the write if it still lives (after
    a network cut it waits in its transaction, and a COMMIT held up on the way could land
    after our answer), then count the request's rows, found by (mac, received_at): all of
    them stored (True) or none (False). StoredUnknown when the database cannot be asked."""
    try:
        async with db.cursor() as cur:
            await execute(cur, _END_BACKEND, {"pid": doubt.backend_pid})
            ended = await cur.fetchone()
            if ended is not None and not ended[0]:
                raise StoredUnknown(f"the connection was lost while storing ({doubt}) and "
                                    "its database session did not end")
            await execute(cur, _STORED_ROWS.format(table=table),
                          {"mac": mac, "at": received_at})
            stored = (await cur.fetchone())[0]
    except StoredUnknown:
        raise
    except DatabaseUnavailable as error:
        raise StoredUnknown(f"the connection was lost while storing ({doubt}) and the "
                            f"database could not be asked whether it was stored ({error})"
                            ) from error
    if stored not in (0, rows):
        raise StoredUnknown(f"{stored} rows found for a request of {rows}")
    return stored == rows


def backend_pid(cur: aiopg.Cursor) -> int:
    """The PostgreSQL process of a cursor's connection (known locally, no round trip)."""
    return cur.connection.raw.get_backend_pid()


def insert_statement(table: sa.Table, columns: tuple[str, ...]) -> str:
    """INSERT ... SELECT over the batch's JSON array, casting each position to its column."""
    casts = [f"(r->>{position})::{table.c[name].type.compile(dialect=DIALECT)}"
             for position, name in enumerate(columns)]
    targets = ", ".join(("mac", "received_at") + columns + ("record",))
    return (f"INSERT INTO {table.name} ({targets}) "
            f"SELECT %(mac)s::macaddr, %(received_at)s, {', '.join(casts)}, r->{len(columns)} "
            f"FROM jsonb_array_elements(%(rows)s::jsonb) AS r")


class TelemetryWriter:
    """Collects rows and flushes them in batches inside one transaction, opened at the first
    flush. A body that fits one batch is written by a single autocommit statement. Leaving the
    context with an exception rolls everything back.

    Pipelined: a full batch is sent while the caller goes on reading and parsing the next
    one, with at most one batch in flight (one connection runs one statement at a time, and
    memory stays at two batches). A failed batch fails the request at the next add or at
    commit, so the transaction still stores all or nothing."""

    def __init__(self, db: Database, statement: str, mac: str, received_at: datetime,
                 batch_rows: int):
        self._db = db
        self._statement = statement
        self._params = {"mac": mac, "received_at": received_at}
        self._batch_rows = batch_rows
        self._rows: list[bytes] = []
        self._pending_bytes = 0
        self._stack = contextlib.AsyncExitStack()
        self._cursor: aiopg.Cursor | None = None
        self._in_flight: asyncio.Task | None = None

    async def __aenter__(self) -> "TelemetryWriter":
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._in_flight is not None:  # failing: let the batch end before the rollback
            in_flight, self._in_flight = self._in_flight, None
            await asyncio.wait([in_flight])
            if not in_flight.cancelled():
                in_flight.exception()  # retrieved: the request fails with the first error
        await self._stack.__aexit__(*exc_info)

    async def add(self, row: bytes) -> None:
        self._rows.append(row)
        self._pending_bytes += len(row)
        if len(self._rows) >= self._batch_rows or self._pending_bytes >= BATCH_BYTES:
            if self._cursor is None:
                self._cursor = await self._stack.enter_async_context(self._db.transaction())
            await self._settle()
            self._in_flight = asyncio.ensure_future(self._send(self._cursor, self._take()))

    async def commit(self, key: UploadKey | None = None) -> None:
        """Write what is left, and `key` with it, and commit. KeyAlreadyUsed when `key` was
        recorded by another upload (nothing is stored; leaving the context rolls back).
        CommitInDoubt when the connection fails during the write that commits (a lone
        batch's autocommit statement, or COMMIT); a failure before it leaves nothing stored
        and is raised as it is."""
        pid = None
        try:
            if self._cursor is None:
                if self._rows or key is not None:
                    async with self._db.cursor() as cur:
                        pid = backend_pid(cur)
                        await self._send_last(cur, key)
                return
            await self._settle()
            if self._rows or key is not None:
                await self._send_last(self._cursor, key)
            pid = backend_pid(self._cursor)
            await self._stack.aclose()  # COMMIT
        except DatabaseUnavailable as error:
            if pid is None:
                raise
            raise CommitInDoubt(pid, str(error)) from error

    async def _send_last(self, cur: aiopg.Cursor, key: UploadKey | None) -> None:
        """The request's last write, one statement: its remaining rows, its key, or both
        (the rows stored only when the key is new)."""
        if key is None:
            await self._send(cur, self._take())
        elif not self._rows:
            await self._record_key(cur, key)
        else:
            keyed = (f"WITH key AS ({INSERT_KEY}) {self._statement} "
                     "WHERE EXISTS (SELECT 1 FROM key)")
            await execute(cur, keyed, {**self._params, "rows": self._take(), **key.params()})
            if cur.rowcount == 0:
                raise KeyAlreadyUsed(key.key)

    @staticmethod
    async def _record_key(cur: aiopg.Cursor, key: UploadKey) -> None:
        await execute(cur, INSERT_KEY, key.params())
        if cur.rowcount == 0:
            raise KeyAlreadyUsed(key.key)

    async def _settle(self) -> None:
        """Wait for the batch in flight; its failure is raised here."""
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            await in_flight

    def _take(self) -> str:
        batch = b"[" + b",".join(self._rows) + b"]"
        self._rows.clear()
        self._pending_bytes = 0
        return batch.decode()

    async def _send(self, cur: aiopg.Cursor, batch: str) -> None:
        await execute(cur, self._statement, {**self._params, "rows": batch})
