"""A router's stored records read back, oldest first, each once: for `router-backend
telemetry export` (NDJSON) and `router-backend telemetry sql` (rows for psql).

Blocking, with a server-side cursor: one statement, so one snapshot of the
chunks (a merge committing meanwhile is not seen half done), fetched a few chunks at a time,
so memory holds a few chunks whatever the router stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

import orjson

from server.telemetry.sql import ROUTER_CHUNKS
from server.db.connect import connect
from server.db.location import DatabaseLocation
from server.telemetry.chunks import Chunk, decompress
from server.telemetry.indicators import Indicator, carries

BEGINNING = datetime(1, 1, 1, tzinfo=timezone.utc)
END = datetime(9999, 12, 31, tzinfo=timezone.utc)
CHUNKS_PER_FETCH = 20


@dataclass(frozen=True)
class StoredRecord:
    chunk_id: int
    ordinal: int              # 1-based position in its chunk
    kind: str                 # events or cfm
    received_at: datetime
    line: bytes               # the record as received, on one line


def stored_chunks(location: DatabaseLocation, mac: str, kind: str | None = None,
                  since: datetime | None = None, until: datetime | None = None
                  ) -> Iterator[tuple[int, str, Chunk]]:
    """(chunk id, kind, chunk) of the router's chunks that may hold records received in
    [since, until), oldest first."""
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor(name="telemetry_export") as cur:
            cur.itersize = CHUNKS_PER_FETCH
            cur.execute(ROUTER_CHUNKS, {"mac": mac, "kind": kind,
                                        "since": since or BEGINNING, "until": until or END})
            for chunk_id, chunk_kind, times, counts, body in cur:
                yield chunk_id, chunk_kind, Chunk(decompress(bytes(body)), times, counts)
    finally:
        conn.close()


def stored_records(location: DatabaseLocation, mac: str, kind: str | None = None,
                   since: datetime | None = None, until: datetime | None = None
                   ) -> Iterator[StoredRecord]:
    since, until = since or BEGINNING, until or END
    for chunk_id, chunk_kind, chunk in stored_chunks(location, mac, kind, since, until):
        for ordinal, (line, moment) in enumerate(zip(chunk.lines, chunk.record_times()), 1):
            if since <= moment < until:
                yield StoredRecord(chunk_id, ordinal, chunk_kind, moment, line)


def ndjson(location: DatabaseLocation, mac: str, kind: str | None = None,
           since: datetime | None = None, until: datetime | None = None
           ) -> Iterator[tuple[int, bytes]]:
    """(records, NDJSON text) a chunk at a time: a chunk wholly within the range as it is,
    one that straddles a bound filtered record by record."""
    low, high = since or BEGINNING, until or END
    for _, _, chunk in stored_chunks(location, mac, kind, since, until):
        if low <= chunk.first_received_at and chunk.received_at < high:
            kept = chunk.lines
        else:
            kept = [line for line, moment in zip(chunk.lines, chunk.record_times())
                    if low <= moment < high]
        if kept:
            yield len(kept), b"\n".join(kept) + b"\n"


def records_carrying(location: DatabaseLocation, mac: str, wanted: Indicator,
                     kind: str | None = None, since: datetime | None = None,
                     until: datetime | None = None, deadline: float | None = None
                     ) -> Iterator[StoredRecord]:
    """The router's stored records in [since, until) that carry `wanted` (the drill-down of
    a hunt: `telemetry export --match`, the console's records page); with `deadline` (a
    time.monotonic() instant), only those read before it."""
    for stored in stored_records(location, mac, kind, since, until):
        if deadline is not None and time.monotonic() > deadline:
            return
        if carries(orjson.loads(stored.line), wanted):
            yield stored
