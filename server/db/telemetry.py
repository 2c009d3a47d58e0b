"""Transactional writes of a telemetry upload while its body streams in: its records in
chunks (server/telemetry/chunks.py) of at most `batch_rows` records or BATCH_BYTES, and its
summary rows (server/telemetry/summary.py), all in one transaction with its Idempotency-Key.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

import aiopg

from server.db.chunks import chunk_params, store_statement, summary_params
from server.db.pool import Database, DatabaseUnavailable, execute
from server.db.upload_keys import UploadKey
from server.telemetry.chunks import Chunk, compress
from server.telemetry.summary import Summary

BATCH_BYTES = 4 * 1024 * 1024  # of records before compression, held about twice
SUMMARY_ROWS = 10_000  # a summary this large is written with the next chunk (bounded memory)


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
_STORED_RECORDS = ("SELECT coalesce(sum(records), 0) FROM telemetry_chunks "
                   "WHERE mac = %(mac)s AND kind = %(kind)s AND received_at = %(at)s")


async def was_committed(db: Database, kind: str, mac: str, received_at: datetime,
                        doubt: CommitInDoubt, rows: int) -> bool:
    """Settle a CommitInDoubt: end the backend that held the write if it still lives (after
    a network cut it waits in its transaction, and a COMMIT held up on the way could land
    after our answer), then count the request's records, found by (mac, kind, received_at): all
    of them stored (True) or none (False). StoredUnknown when the database cannot be asked."""
    try:
        async with db.cursor() as cur:
            await execute(cur, _END_BACKEND, {"pid": doubt.backend_pid})
            ended = await cur.fetchone()
            if ended is not None and not ended[0]:
                raise StoredUnknown(f"the connection was lost while storing ({doubt}) and "
                                    "its database session did not end")
            await execute(cur, _STORED_RECORDS, {"mac": mac, "kind": kind, "at": received_at})
            stored = (await cur.fetchone())[0]
    except StoredUnknown:
        raise
    except DatabaseUnavailable as error:
        raise StoredUnknown(f"the connection was lost while storing ({doubt}) and the "
                            f"database could not be asked whether it was stored ({error})"
                            ) from error
    if stored not in (0, rows):
        raise StoredUnknown(f"{stored} records found for a request of {rows}")
    return stored == rows


def backend_pid(cur: aiopg.Cursor) -> int:
    """The PostgreSQL process of a cursor's connection (known locally, no round trip)."""
    return cur.connection.raw.get_backend_pid()


class TelemetryWriter:
    """Collects an upload's records, writes them in chunks inside one transaction, opened at
    the first full chunk, and its summary with the last one. An upload that fits one chunk
    is written by a single autocommit statement. Leaving the context with an exception
    rolls everything back.

    Pipelined: a full chunk is compressed (in a thread: zstd lets go of the GIL) and sent
    while the caller goes on reading and parsing the next one, with at most one chunk in
    flight. A failed write fails the request at the next add or at commit, so the
    transaction still stores all or nothing."""

    def __init__(self, db: Database, mac: str, kind: str, received_at: datetime,
                 batch_rows: int):
        self._db = db
        self._params = {"mac": mac, "kind": kind}
        self._events = kind == "events"
        self._received_at = received_at
        self._batch_rows = batch_rows
        self._lines: list[bytes] = []
        self._pending_bytes = 0
        self.summary = Summary()
        self._stack = contextlib.AsyncExitStack()
        self._cursor: aiopg.Cursor | None = None
        self._in_flight: asyncio.Task | None = None

    async def __aenter__(self) -> "TelemetryWriter":
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._in_flight is not None:  # failing: let the write end before the rollback
            in_flight, self._in_flight = self._in_flight, None
            await asyncio.wait([in_flight])
            if not in_flight.cancelled():
                in_flight.exception()  # retrieved: the request fails with the first error
        await self._stack.__aexit__(*exc_info)

    def add(self, line: bytes, values: list, record: dict) -> bool:
        """One record: on one line, its column values and itself parsed (for the summary).
        True when a chunk is full: the caller then awaits `flush` (a plain call per record,
        an await per chunk)."""
        if self._events:
            self.summary.add_event(values, record)
        else:
            self.summary.add_flow(values)
        self._lines.append(line)
        self._pending_bytes += len(line)
        return len(self._lines) >= self._batch_rows or self._pending_bytes >= BATCH_BYTES

    async def flush(self) -> None:
        """Send the full chunk (and a large summary) while the caller reads on."""
        if self._cursor is None:
            self._cursor = await self._stack.enter_async_context(self._db.transaction())
        await self._settle()
        summary = self._take_summary() if len(self.summary) >= SUMMARY_ROWS else None
        self._in_flight = asyncio.ensure_future(
            self._send(self._cursor, self._take_chunk(), summary, None))

    async def commit(self, key: UploadKey | None = None) -> None:
        """Write what is left (records, summary) and `key` with it, and commit.
        KeyAlreadyUsed when `key` was recorded by another upload (nothing is stored; leaving
        the context rolls back). CommitInDoubt when the connection fails during the write
        that commits (a lone statement in autocommit, or COMMIT); a failure before it leaves
        nothing stored and is raised as it is."""
        pid = None
        try:
            chunk, summary = self._take_chunk(), self._take_summary()
            if self._cursor is None:
                if chunk or summary or key is not None:
                    async with self._db.cursor() as cur:
                        pid = backend_pid(cur)
                        await self._send(cur, chunk, summary, key)
                return
            await self._settle()
            if chunk or summary or key is not None:
                await self._send(self._cursor, chunk, summary, key)
            pid = backend_pid(self._cursor)
            await self._stack.aclose()  # COMMIT
        except DatabaseUnavailable as error:
            if pid is None:
                raise
            raise CommitInDoubt(pid, str(error)) from error

    async def _settle(self) -> None:
        """Wait for the write in flight; its failure is raised here."""
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            await in_flight

    def _take_chunk(self) -> Chunk | None:
        if not self._lines:
            return None
        chunk = Chunk(self._lines, [self._received_at], [len(self._lines)])
        self._lines = []
        self._pending_bytes = 0
        return chunk

    def _take_summary(self) -> Summary | None:
        if not len(self.summary):
            return None
        summary, self.summary = self.summary, Summary()
        return summary

    async def _send(self, cur: aiopg.Cursor, chunk: Chunk | None, summary: Summary | None,
                    key: UploadKey | None) -> None:
        params = dict(self._params)
        if chunk is not None:
            body = await asyncio.to_thread(compress, chunk.lines)
            params.update(chunk_params(chunk, body))
        if summary is not None:
            params.update(summary_params(summary, self._received_at))
        if key is not None:
            params.update(key.params())
        statement = store_statement(chunk is not None, summary is not None, key is not None)
        await execute(cur, statement, params)
        if key is not None and (await cur.fetchone())[0] == 0:
            raise KeyAlreadyUsed(key.key)
