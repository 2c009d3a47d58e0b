"""Transactional writes of a telemetry upload while its body streams in: its records in
chunks (chunks.py) of at most `batch_rows` records or BATCH_BYTES, its summary rows
(summary.py) and the row that tells the hunt indexer of it (server/hunt/indexer.py), all in
one transaction with its Idempotency-Key (SQL: server/telemetry/sql.py, server/hunt/sql.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Callable, Protocol

import psycopg

from server.telemetry.sql import INSERT_CHUNK, summary_statements
from server.db.pool import Database, DatabaseUnavailable, execute
from server.db.rows import mogrify_of
from server.db.telemetry import CommitInDoubt, KeyAlreadyUsed, backend_pid
from server.telemetry.upload_key_sql import INSERT_KEY, UploadKey, key_recorded_before
from server.telemetry.chunks import Chunk, compress, one_line
from server.telemetry.extract import ROW_OF, validate
from server.telemetry.summary import FLOW_TYPES, Summary

BATCH_BYTES = 4 * 1024 * 1024  # of records before compression, held about twice
# What each endpoint reads of what it stores: generation reads alerts from /log/events and
# flows from /log/cfm, the hunt the protocol records; other records are stored as sent and
# counted apart in the answer (`unread`), so an agent can see it posts to the wrong place.
READ_TYPES = {"events": frozenset({"alert"}),
              "cfm": FLOW_TYPES | {"dns", "tls", "http", "fileinfo", "smb", "ssh"}}
UNREAD_TYPES_NAMED = 20  # in an answer; the rest counted as "(other)"
SUMMARY_ROWS = 10_000  # a summary this large is written with the next chunk (bounded memory)
# A write this small is bound on the event loop (0.14 ms for 2 alerts, 0.45 for 64), not on
# a thread: the hop there and back costs 0.15-0.25 ms when the threads are idle, and behind
# the other uploads' binds far more (the agent's uploads are a few records).
INLINE_RECORDS = 64
INLINE_BYTES = 64 * 1024
Turn = contextlib.AbstractAsyncContextManager  # held for a connection, or a statement


class Announcement(Protocol):
    """How a reader of the chunks learns of a whole upload (the hunt's queue:
    server/hunt/postings.py PendingUpload): `statement`, sent with the upload's last chunk in
    its transaction, given the upload's mac, kind, upload_received_at, pending_records,
    pending_network and what `params` adds; `observe` is shown each stored record as parsed
    (a record rejected is not shown)."""

    statement: str

    def observe(self, record: dict) -> None: ...

    def params(self) -> dict: ...


class TelemetryWriter:
    """Collects an upload's records, writes them in chunks inside one transaction, opened at
    the first full chunk, and its summary with the last one. An upload that fits one chunk
    is written by one request of statements at commit (an implicit transaction). Each write
    is one statement per table, so that under Citus each runs on the router's shard alone.
    Leaving the context with an exception rolls everything back.

    Pipelined: a full chunk is compressed (in a thread: zstd lets go of the GIL) and sent
    while the caller goes on reading and parsing the next one, with at most one chunk in
    flight. A failed write fails the request at the next add or at commit, so the
    transaction still stores all or nothing."""

    def __init__(self, db: Database, mac: str, kind: str, received_at: datetime,
                 batch_rows: int, network: str | None = None,
                 announce: Announcement | None = None,
                 connection_turn: Callable[[bool], Turn] | None = None,
                 write_turn: Callable[[], Turn] | None = None):
        """`network`: where the upload came from (engine/addresses.network_of), written with
        its summary rows for the fleet to count. `announce`: how a reader of the chunks
        learns of the whole upload (Announcement), given by the caller so that telemetry
        names no table of the hunt. `connection_turn(body_read)`: taken
        before the upload takes a connection and held until it gives it back (ingestion's
        fair turns at its pool: server/ingest/turns.py), `body_read` when the whole upload
        is read (one statement to go, not a body still arriving); `write_turn`: held while one of
        its statements runs (the turns of INGEST_WRITES_AT_ONCE)."""
        self._db = db
        self._params = {"mac": mac, "kind": kind}
        self._network = network
        self._announce = announce
        self._connection_turn = connection_turn or (lambda body_read: contextlib.nullcontext())
        self._write_turn = write_turn or contextlib.nullcontext
        self._row_of = ROW_OF[kind]
        self._received_at = received_at
        self._batch_rows = batch_rows
        self._lines: list[bytes] = []
        self._pending_bytes = 0
        self.summary = Summary()
        self._reads = READ_TYPES[kind]
        self.unread: dict[str, int] = {}  # event_type -> records stored, not read
        self._records = 0
        self._stack = contextlib.AsyncExitStack()
        self._cursor: psycopg.AsyncCursor | None = None
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

    def add(self, raw: bytes) -> bool:
        """One record as received: checked (RecordError when it cannot be stored; nothing
        is kept of it then), summarised and put on its line of the chunk. True when the
        chunk is full: the caller then awaits `flush` (a plain call per record, an await
        per chunk)."""
        values, record = validate(raw, self._row_of)
        self.summary.add(self._params["kind"], values, record)
        if (event_type := record.get("event_type")) not in self._reads:
            name = event_type if isinstance(event_type, str) else "(none)"
            if name in self.unread or len(self.unread) < UNREAD_TYPES_NAMED:
                self.unread[name] = self.unread.get(name, 0) + 1
            else:
                self.unread["(other)"] = self.unread.get("(other)", 0) + 1
        if self._announce is not None:
            self._announce.observe(record)
        line = one_line(raw)
        self._records += 1
        self._lines.append(line)
        self._pending_bytes += len(line)
        return len(self._lines) >= self._batch_rows or self._pending_bytes >= BATCH_BYTES

    async def flush(self) -> None:
        """Send the full chunk (and a large summary) while the caller reads on."""
        if self._cursor is None:
            await self._stack.enter_async_context(self._connection_turn(False))
            self._cursor = await self._stack.enter_async_context(self._db.transaction())
        await self._settle()
        summary = self._take_summary() if len(self.summary) >= SUMMARY_ROWS else None
        self._in_flight = asyncio.ensure_future(
            self._send(self._cursor, self._take_chunk(), summary, None))

    async def commit(self, key: UploadKey | None = None) -> None:
        """Write what is left (records, summary), `key` and the upload's row for the hunt
        indexer with it, and commit.
        KeyAlreadyUsed when `key` was recorded by another upload (nothing is stored; leaving
        the context rolls back). CommitInDoubt when the connection fails during the write
        that commits (the statements of an upload that fits one chunk, or COMMIT); a failure
        before it leaves nothing stored and is raised as it is."""
        pid = None
        try:
            chunk, summary = self._take_chunk(), self._take_summary()
            if self._cursor is None:
                async with self._connection_turn(True), self._db.cursor() as cur:
                    pid = backend_pid(cur)
                    await self._send(cur, chunk, summary, key, last=True)
                return
            await self._settle()
            await self._send(self._cursor, chunk, summary, key, last=True)
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

    async def _send(self, cur: psycopg.AsyncCursor, chunk: Chunk | None, summary: Summary | None,
                    key: UploadKey | None, last: bool = False) -> None:
        """One statement per table (server/telemetry/sql.py), sent together as one text: one
        round trip, and outside a transaction one implicit transaction (all or nothing). The
        key first: one recorded by another upload fails it, and nothing is written. The
        `last` send announces the upload (its records are in chunks by then). The text is
        made on a thread (`_text`), off the event loop, unless the write is small."""
        if _small(chunk, summary):
            text = self._text(cur, chunk, summary, key, last)
        else:
            text = await asyncio.to_thread(self._text, cur, chunk, summary, key, last)
        try:
            async with self._write_turn():
                await execute(cur, text)
        except psycopg.errors.UniqueViolation as error:
            if key is not None and key_recorded_before(error):
                raise KeyAlreadyUsed(key.key) from None
            raise

    def _text(self, cur: psycopg.AsyncCursor, chunk: Chunk | None, summary: Summary | None,
              key: UploadKey | None, last: bool) -> str:
        """The chunk compressed (zstd lets go of the GIL) and every statement bound on the
        client, each on its own (server/db/rows.py): a summary's rows, flow ids full of
        quotes, are milliseconds of Python that would stall every other request."""
        mogrify = mogrify_of(cur)
        texts: list[str] = []
        if key is not None:
            texts.append(mogrify(INSERT_KEY, {**self._params, **key.params()}))
        if chunk is not None:
            texts.append(mogrify(INSERT_CHUNK,
                                 {**self._params, **chunk.params(compress(chunk.lines))}))
        if summary is not None:
            texts.extend(statement.text(cur) for statement in summary_statements(
                {**self._params, **summary.params(self._received_at), "network": self._network}))
        if last and self._announce is not None:
            texts.append(mogrify(self._announce.statement, {
                **self._params, "upload_received_at": self._received_at,
                "pending_records": self._records, "pending_network": self._network,
                **self._announce.params()}))
        return ";\n".join(texts)


def _small(chunk: Chunk | None, summary: Summary | None) -> bool:
    """Whether a write is small enough to bind on the event loop (INLINE_RECORDS)."""
    return (chunk is None or (len(chunk.lines) <= INLINE_RECORDS
                              and sum(map(len, chunk.lines)) <= INLINE_BYTES)) \
        and (summary is None or len(summary) <= INLINE_RECORDS)
