"""The hunt indexer: postings written from the stored chunks, out of the upload's transaction.

An upload stores its chunks and one `hunt_pending` row (migration 0032) in its own
transaction and is acknowledged; the indexer, one upload a transaction, takes (deletes) its
pending row, reads its chunks one at a time, tallies their values
(server/telemetry/postings.py) and writes their postings (server/db/hunt.py). So the upload
pays one small row for the index, not the tally and the postings' statement (a fifth of
ingestion's time on alerts-only bodies); a crash at any moment leaves an upload pending or
indexed, never both or neither; a replayed upload stores no chunk and no pending row, so
adds no posting; a router removed meanwhile gets none back. An upload tallies at most what
its router's day has left of HUNT_POSTINGS_PER_ROUTER_DAY (and POSTINGS_FREE more, for the
values it posted earlier that day), so one upload cannot outgrow the day's budget, and its
memory follows that, not its size. One that cannot be written is set aside and logged by
name: no upload holds up the others.

One indexer at a time across processes and hosts (an advisory lock: under Citus row locks
of a multi-shard read are refused). It runs every HUNT_INDEX_SECONDS in the process that
runs the jobs, and before a hunt (`caught_up`), so that a hunt sees every upload
acknowledged before it was asked, or says how many it could not wait for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import timezone
from typing import Any

import orjson

from server.background import BackgroundTasks, pause
from server.db import hunt as hunt_db
from server.db.jobs import lock_key
from server.db.pool import Database, DatabaseUnavailable, execute
from server.metrics import Metrics
from server.telemetry.chunks import decompress
from server.telemetry.postings import POSTINGS_FREE, Postings, PostingsBudget

log = logging.getLogger("router_backend.hunt")

LOCK = "hunt-index"
BATCH_UPLOADS = 100  # pending uploads listed at a time (each indexed in a transaction)
HUNT_WAIT_SECONDS = 5.0  # how long a hunt waits for the indexer to catch up


@dataclass
class Indexed:
    uploads: int = 0
    records: int = 0
    postings: int = 0  # values offered to the index (new or added to)
    dropped: int = 0  # values past an upload's allowance or its router's day
    set_aside: int = 0  # uploads whose postings could not be written (logged, each)
    left: int = 0  # pending uploads not indexed (the deadline came first)

    def as_detail(self) -> dict:
        return dict(vars(self))


async def index_pending(db: Database, postings_per_day: int,
                        wait_seconds: float = 0.0) -> Indexed:
    """Index every upload pending when called, one at a time. Another process indexing:
    with `wait_seconds`, wait for it (up to then) and index what it left; without, do
    nothing. Stops at the deadline with `left` counted."""
    deadline = time.monotonic() + wait_seconds
    done = Indexed()
    async with db.session() as lock:
        if not await _locked(lock, deadline):
            done.left = await _pending_count(db)
            return done
        try:
            until = await _value(db, "SELECT clock_timestamp()")
            while batch := await db.fetchall(hunt_db.PENDING, {"until": until,
                                                               "limit": BATCH_UPLOADS}):
                for mac, kind, received_at, _ in batch:
                    await _index_one(db, mac, kind, received_at, postings_per_day, done)
                    if wait_seconds and time.monotonic() > deadline:
                        done.left = await _pending_count(db)
                        return done
        finally:
            await execute(lock, "SELECT pg_advisory_unlock(%s)", (lock_key(LOCK),))
    return done


async def _locked(cur, deadline: float) -> bool:
    while True:
        await execute(cur, "SELECT pg_try_advisory_lock(%s)", (lock_key(LOCK),))
        if (await cur.fetchone())[0]:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


async def _pending_count(db: Database) -> int:
    return await _value(db, "SELECT count(*) FROM hunt_pending")


async def _value(db: Database, query: str) -> Any:
    row = await db.fetchone(query)
    assert row is not None  # a query of one row
    return row[0]


async def _index_one(db: Database, mac: str, kind: str, received_at, postings_per_day: int,
                     done: Indexed) -> None:
    """One upload in one transaction: its pending row taken, its chunks read one at a time
    and tallied (on a thread: the event loop goes on), its postings written. An upload
    whose postings cannot be written (a record the tally cannot read, a value the database
    refuses) is set aside, logged by name, so that it never holds up the others."""
    key = {"mac": mac, "kind": kind, "received_at": received_at}
    try:
        async with db.transaction() as cur:
            await execute(cur, hunt_db.TAKE_PENDING, key)
            taken = await cur.fetchone()
            if taken is None:  # taken by another, or its router removed
                return
            written_at = taken[0]
            day = written_at.astimezone(timezone.utc).replace(hour=0, minute=0, second=0,
                                                               microsecond=0)
            await execute(cur, hunt_db.DAY_USED, {"mac": mac, "day": day})
            used = (await cur.fetchone() or (0,))[0]
            # Its router's day left, and a free allowance more for the values it posted
            # earlier that day (the statement adds no new one past the budget).
            postings = Postings(PostingsBudget(max(0, postings_per_day - used) + POSTINGS_FREE))
            records = 0
            async for (body,) in cur.stream(hunt_db.UPLOAD_CHUNKS, key):
                records += await asyncio.to_thread(_tally, postings, body)
            statement = await asyncio.to_thread(_statement, postings, mac, written_at,
                                                postings_per_day)
            if statement is not None:
                await execute(cur, *statement)
    except DatabaseUnavailable:
        raise
    except Exception as error:  # the transaction rolled back: the row is pending again
        await _set_aside(db, key, error)
        done.set_aside += 1
        return
    done.uploads += 1
    done.records += records
    done.dropped += postings.budget.dropped
    done.postings += len(postings.counts)


def _tally(postings: Postings, body: bytes) -> int:
    lines = decompress(body)
    for line in lines:
        postings.add(orjson.loads(line))
    return len(lines)


def _statement(postings: Postings, mac: str, written_at, postings_per_day: int
               ) -> tuple[str, dict] | None:
    params = postings.params(written_at)
    if not params["rows"] and not postings.budget.dropped:
        return None
    return hunt_db.postings_statement({"mac": mac, "budget": postings_per_day,
                                       "dropped": postings.budget.dropped, **params})


async def _set_aside(db: Database, key: dict, error: Exception) -> None:
    async with db.transaction() as cur:
        await execute(cur, hunt_db.TAKE_PENDING, key)
    log.warning("hunt index: the upload of %s received at %s (%s) set aside, its records "
                "stored and not indexed: %s", key["mac"], key["received_at"].isoformat(),
                key["kind"], str(error).splitlines()[0] if str(error) else type(error).__name__)


class HuntIndexer:
    """The indexer's loop in the process that runs the jobs: every `seconds`, every pending
    upload indexed; a failure (the database away) tried again at the next turn, the pending
    rows kept."""

    def __init__(self, db: Database, postings_per_day: int, seconds: float,
                 metrics: Metrics) -> None:
        self._db = db
        self._postings_per_day = postings_per_day
        self._seconds = seconds
        self._health = metrics.loop_health("hunt-indexer", log)
        self._tasks = BackgroundTasks()

    def start(self) -> None:
        self._tasks.spawn(self._loop(), "hunt-indexer")

    async def stop(self) -> None:
        await self._tasks.stop()

    async def _loop(self) -> None:
        while True:
            await pause(self._seconds)
            try:
                done = await index_pending(self._db, self._postings_per_day)
            except Exception as error:  # the database away, or a statement refused: the
                self._health.failed(error)  # loop lives on, its health metric says so
                continue
            self._health.succeeded()
            if done.dropped:
                log.warning("hunt index: %d values of %d uploads past their uploads' "
                            "allowance, stored but not indexed", done.dropped, done.uploads)


async def caught_up(db: Database, postings_per_day: int) -> int:
    """Before a hunt: index what is pending, waiting up to HUNT_WAIT_SECONDS for an indexer
    at work; the uploads still pending then (the answer says so)."""
    return (await index_pending(db, postings_per_day, HUNT_WAIT_SECONDS)).left


def pending_note(left: int) -> list[str]:
    return [f"{left} upload(s) acknowledged before this hunt are not indexed yet: hunt "
            "again in a minute"] if left else []

