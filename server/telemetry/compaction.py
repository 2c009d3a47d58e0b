"""The compaction job: each router's small chunks (the agent's 10-second uploads, one or two
records each) merged into chunks of TELEMETRY_CHUNK_RECORDS records, as Loki cuts chunks and
TimescaleDB compresses aged ones. A chunk of 2 records takes about 230 bytes a record, one
of 1,000 about 40 (docs/telemetry.md).

A merge is one transaction per router, kind and partition: the small chunks are deleted
(returning their contents), merged in order of receipt, cut into full chunks (compressed
harder than at ingestion: they are written once) and one remainder, and inserted. It
commits whole or not at all: a crash loses and doubles nothing. Uploads only insert new chunks, so a merge never
waits for them nor they for it. Only chunks received TELEMETRY_COMPACT_SETTLE_SECONDS ago
or more are taken (an upload's own chunk is settled with it long before), and only in the
partitions of the last two days, unless a run by hand asks for all.

The remainder (fewer records than a full chunk) is merged again with the next run's small
chunks, until its partition's day is over, in blocks: once it holds OPEN_BLOCK_RECORDS, that
block is left as it is and the next records start another, until the router's blocks and
small chunks fill a full chunk (merged then) or the day closes; so a record is recompressed
a few dozen times in its first day, not a hundred (docs/telemetry.md gives the arithmetic).
Once a partition is closed (its end settled: no upload can land in it any more), what a
merge writes there is written once, so the remainder too is compressed harder: at the
agent's cadence of 1,000 records a day a router's day never fills a chunk, and its one
remainder is nearly all it keeps. Once nothing is left to merge in a closed partition, the
space its day of merges left behind is given back (closed_days.py). Last, each router's
hourly summaries of the closed days are packed into a row a day (summary_days.py).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from server.background import pause, raise_if_cancelled
from server.telemetry.sql import INSERT_CHUNK, SMALL_CHUNK_GROUPS, TAKE_SMALL_CHUNKS
from server.db.citus import distributed_tables
from server.db.partitions import LIST_PARTITIONS, Partition, partitions_from_rows
from server.db.pool import Database, execute
from server.telemetry.chunks import (COMPACT_LEVEL, INGEST_LEVEL, Chunk, compress, decompress,
                                     merged, split)
from server.telemetry.closed_days import rewrite_if_wasteful
from server.telemetry.summary_days import pack_summary_days
from server.telemetry.legacy import move_legacy_rows

log = logging.getLogger("router_backend.jobs")

RECENT = timedelta(days=2)
FLEET_WINDOW = timedelta(hours=24)   # FLEET_WINDOW_HOURS's default
# An upload begun before midnight may still add to its hour's summaries: a day's are never
# packed sooner after it, even by a run by hand that takes every small chunk (`--all`).
SUMMARY_SETTLE = timedelta(minutes=5)
CHUNKS_PER_MERGE = 2_000      # small chunks taken by one transaction at most
PAUSE_SECONDS = 0.01          # between transactions: lets ingestion's statements through
# A closed day's routers merged at once: its chunks are written once at COMPACT_LEVEL (24 us
# a record with the column layout; the first run after a day of 440,000 routers would take
# 3.9 hours in one lane on 2 cores, bench/closing_run.py); zstd lets go of the GIL, so
# the lanes spread its part over cores (2.8 hours there).
MERGES_AT_ONCE = 4
# An open day's remainder is cut into blocks of this many records, each left as it is (not
# merged again) until the day closes or a router's small chunks fill a chunk: at the
# agent's cadence a router's remainder was its whole day, rewritten at every run, and the
# space of its last version took as much again (its open day's chunks took 124 bytes a
# record by the end of the day, 98 in blocks: python -m bench.storage).
OPEN_BLOCK_RECORDS = 250


@dataclass
class CompactionReport:
    merged_chunks: int = 0     # small chunks taken
    written_chunks: int = 0    # chunks written in their place
    records: int = 0
    legacy: dict = field(default_factory=dict)
    rewritten: list[dict] = field(default_factory=list)   # closed days (closed_days.py)
    summary_days: dict = field(default_factory=dict)      # summaries packed (summary_days.py)

    def as_detail(self) -> dict:
        return {"merged_chunks": self.merged_chunks, "written_chunks": self.written_chunks,
                "records": self.records, "legacy": self.legacy, "rewritten": self.rewritten,
                "summary_days": self.summary_days}


async def compact(db: Database, chunk_records: int, settle: timedelta, unread: str,
                  everything: bool = False, now: datetime | None = None,
                  fleet_window: timedelta = FLEET_WINDOW,
                  lanes: int = MERGES_AT_ONCE) -> CompactionReport:
    """Move what is left of the row tables of before, then merge small chunks; an upload
    for which the SQL condition `unread` holds (chunk `c`; the hunt's UNREAD_UPLOAD) is left
    as written. Then pack the closed days' hourly summaries (the alerts' once past the
    fleet job's window, `fleet_window`: FLEET_WINDOW_HOURS)."""
    now = now or datetime.now(timezone.utc)
    report = CompactionReport(legacy=await move_legacy_rows(db, chunk_records))
    since = datetime.min.replace(tzinfo=timezone.utc) if everything else now - RECENT
    settled = now - settle
    bounds = {"since": since, "settled": settled, "size": chunk_records}
    rewrite = "telemetry_chunks" not in await distributed_tables(db)
    for partition in await _partitions_between(db, since, settled):
        closed = partition.end <= settled
        groups = SMALL_CHUNK_GROUPS.format(partition=partition.name)
        take = TAKE_SMALL_CHUNKS.format(partition=partition.name, unread=unread)
        found = [(mac, kind, _taken_below(closed, records, chunk_records))
                 for mac, kind, records in await db.fetchall(groups, bounds)]
        await _merge_groups(db, take, bounds, found, chunk_records, report, closed,
                            lanes if closed else 1)
        # Merged to the end (nothing left, an upload not yet indexed included): rewritten.
        if closed and rewrite and not await db.fetchall(groups, bounds):
            if done := await rewrite_if_wasteful(db, partition):
                report.rewritten.append(done)
    report.summary_days = await pack_summary_days(db, now, max(settle, SUMMARY_SETTLE),
                                                  fleet_window)
    return report


def _taken_below(closed: bool, records: int, chunk_records: int) -> int:
    """The size of the chunks a merge of a router's small chunks (`records` in all) takes:
    all of them in a closed partition, or where they fill a chunk; otherwise the remainder
    and what came since, an open day's blocks left as they are."""
    if closed or records >= chunk_records:
        return chunk_records
    return min(chunk_records, OPEN_BLOCK_RECORDS)


async def _partitions_between(db: Database, since: datetime, until: datetime
                              ) -> list[Partition]:
    """The partitions of telemetry_chunks that may hold chunks received in [since, until)."""
    return [partition for partition in partitions_from_rows(
                await db.fetchall(LIST_PARTITIONS, {"table": "telemetry_chunks"}))
            if partition.end > since and (partition.start is None or partition.start < until)]


async def _merge_groups(db: Database, take: str, bounds: dict, groups: list[tuple],
                        chunk_records: int, report: CompactionReport, closed: bool,
                        lanes: int) -> None:
    """Merge each (mac, kind, size: the chunks below it taken) of `groups` to its end,
    `lanes` routers at a time: a closed partition's MERGES_AT_ONCE (their compression in
    threads, zstd without the GIL), an open one's one (its merges are cheap and share the
    database with the day's uploads). The first lane that fails stops the others and its
    error is raised; what the others committed stays merged."""
    pending = iter(groups)

    async def merge_in_turn(threads: Executor | None) -> None:
        for mac, kind, size in pending:   # one iterator: each group taken by one lane
            raise_if_cancelled()          # a cancellation a statement dropped (see `pause`)
            while await _merge(db, take, {**bounds, "mac": mac, "kind": kind, "size": size,
                                          "chunks": CHUNKS_PER_MERGE},
                               chunk_records, report, closed, threads):
                await pause(PAUSE_SECONDS)

    if lanes == 1:
        return await merge_in_turn(None)
    # Threads of their own: in a lone process (HTTP_WORKERS=1) the uploads bind their large
    # writes on the default executor's few threads, which the lanes would otherwise fill.
    # Plain tasks, not a TaskGroup: on Python 3.11 a TaskGroup whose task fails leaves the
    # job's own task marked as cancelled (CPython gh-116720), and the job loop's next pause
    # would end it.
    threads = ThreadPoolExecutor(lanes, thread_name_prefix="compaction")
    tasks = [asyncio.create_task(merge_in_turn(threads)) for _ in range(lanes)]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        threads.shutdown(wait=False)   # a cut still running ends on its own, unused
    failed = [error for task in tasks
              if not task.cancelled() and (error := task.exception()) is not None]
    for other in failed[1:]:
        log.error("telemetry compaction: another lane failed too", exc_info=other)
    if failed:
        raise failed[0]


class _Alone(Exception):
    """Fewer than two small chunks were taken (another run merged them): put nothing back."""


async def _merge(db: Database, take: str, params: dict, chunk_records: int,
                 report: CompactionReport, closed: bool, threads: Executor | None = None
                 ) -> bool:
    """One transaction; whether it took a full batch (more may be waiting). `closed`: the
    partition takes no more uploads."""
    try:
        async with db.transaction() as cur:
            await execute(cur, take, params)
            taken = sorted(await cur.fetchall(), key=lambda row: (row[0], row[1]))
            if len(taken) < 2:
                raise _Alone
            pieces = await asyncio.get_running_loop().run_in_executor(
                threads, _recut, taken, chunk_records, closed)
            for piece, body in pieces:
                await execute(cur, INSERT_CHUNK,
                              {"mac": params["mac"], "kind": params["kind"],
                               **piece.params(body)})
    except _Alone:
        return False
    report.merged_chunks += len(taken)
    report.written_chunks += len(pieces)
    report.records += sum(len(piece.lines) for piece, _ in pieces)
    return len(taken) == params["chunks"]


def _recut(taken: list[tuple], chunk_records: int, closed: bool) -> list[tuple[Chunk, bytes]]:
    """The taken chunks' records in order, cut into chunks and compressed (in a thread):
    full ones harder (written once), the remainder fast (merged again when its day closes,
    in blocks of OPEN_BLOCK_RECORDS, the last one at the next run) unless its partition is
    `closed` (then written once too)."""
    whole = merged([Chunk(decompress(bytes(body)), times, counts)
                    for _, _, times, counts, body in taken])
    pieces = split(whole, chunk_records)
    if closed:
        return [(piece, compress(piece.lines, COMPACT_LEVEL)) for piece in pieces]
    full = [piece for piece in pieces if len(piece.lines) >= chunk_records]
    blocks = [block for piece in pieces[len(full):]   # the remainder, if any
              for block in split(piece, OPEN_BLOCK_RECORDS)]
    return ([(piece, compress(piece.lines, COMPACT_LEVEL)) for piece in full]
            + [(block, compress(block.lines, INGEST_LEVEL)) for block in blocks])
