"""Whole uploads already at hand turned into the statements that store them: chunks per
router and UTC day, summaries per router and hour. For records that do not stream in: the
row tables of before (legacy.py), and benchmarks that load history."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import datetime, timezone

import orjson
import psycopg

from server.db.rows import mogrify_of
from server.telemetry.sql import INSERT_CHUNK, summary_statements
from server.telemetry import extract
from server.telemetry.chunks import COMPACT_LEVEL, Chunk, compress, split
from server.telemetry.summary import Summary, hour_of

Upload = tuple[str, datetime, list[bytes]]   # router, receive time, its records (one line each)


def upload_statements(kind: str, uploads: Iterable[Upload], chunk_records: int,
                      cursor: psycopg.Cursor | psycopg.AsyncCursor, level: int = COMPACT_LEVEL
                      ) -> list[str]:
    """`uploads` ordered by router, then receive time; the statements bound by `cursor`
    (the one that runs them, a ClientCursor), each sent alone."""
    mogrify = mogrify_of(cursor)
    chunks, summaries = [], {}
    for (mac, _), day_uploads in itertools.groupby(
            uploads, key=lambda upload: (upload[0], _utc(upload[1]).date())):
        lines, times, counts = [], [], []
        for _, received_at, records in day_uploads:
            lines += records
            times.append(received_at)
            counts.append(len(records))
            _summarise(summaries, mac, kind, received_at, records)
        for piece in split(Chunk(lines, times, counts), chunk_records):
            chunks.append(mogrify(INSERT_CHUNK, {
                "mac": mac, "kind": kind, **piece.params(compress(piece.lines, level))}))
    return chunks + [statement.text(cursor)
                     for (mac, _), (summary, newest) in sorted(summaries.items())
                     for statement in summary_statements({"mac": mac,
                                                          **summary.params(newest)})]


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc)


def _summarise(summaries: dict, mac: str, kind: str, received_at: datetime,
               records: list[bytes]) -> None:
    key = (mac, hour_of(received_at))
    summary, newest = summaries.get(key, (None, received_at))
    summary = summary or Summary()
    for line in records:
        record = orjson.loads(line)
        try:
            values = extract.ROW_OF[kind](record)
        except extract.RecordError:
            continue  # stored before these checks: kept, not summarised
        summary.add(kind, values, record, received_at)
    summaries[key] = (summary, max(newest, received_at))
