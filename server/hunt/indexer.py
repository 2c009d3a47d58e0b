"""The hunt indexer: postings written from the stored chunks, out of the upload's transaction.

An upload stores its chunks and one `hunt_pending` row (migration 0032) in its own
transaction and is acknowledged; the indexer reads the pending uploads' chunks, tallies
their values (server/telemetry/postings.py) and writes their postings (server/db/hunt.py)
and deletes the pending rows in one transaction. So the upload pays one small row for the
index, not the tally and the postings' statement (a fifth of ingestion's time on
alerts-only bodies); a crash at any moment leaves an upload pending or indexed, never both
or neither; a replayed upload stores no chunk and no pending row, so adds no posting.

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

import orjson

from server.background import BackgroundTasks, pause
from server.db import hunt as hunt_db
from server.db.jobs import lock_key
from server.db.pool import Database, execute
from server.metrics import Metrics
from server.telemetry.chunks import decompress
from server.telemetry.postings import Postings

log = logging.getLogger("router_backend.hunt")

LOCK = "hunt-index"
BATCH_UPLOADS = 100  # pending uploads a transaction: with 10,000-record uploads, about a
# million records tallied between commits
HUNT_WAIT_SECONDS = 5.0  # how long a hunt waits for the indexer to catch up


@dataclass
class Indexed:
    uploads: int = 0
    records: int = 0
    postings: int = 0  # values offered to the index (new or added to)
    dropped: int = 0  # values past an upload's own allowance (POSTINGS_FREE...)
    left: int = 0  # pending uploads not indexed (the deadline came first)

    def as_detail(self) -> dict:
        return dict(vars(self))


async def index_pending(db: Database, postings_per_day: int,
                        wait_seconds: float = 0.0) -> Indexed:
    """Index every upload pending when called. Another process indexing: with
    `wait_seconds`, wait for it (up to then) and index what it left; without, do nothing.
    Stops at the deadline with `left` counted."""
    deadline = time.monotonic() + wait_seconds
    done = Indexed()
    async with db.session() as lock:
        if not await _locked(lock, deadline):
            done.left = await _pending_count(db)
            return done
        try:
            until = (await db.fetchone("SELECT clock_timestamp()"))[0]
            while batch := await db.fetchall(hunt_db.PENDING, {"until": until,
                                                               "limit": BATCH_UPLOADS}):
                await _index(db, batch, postings_per_day, done)
                if wait_seconds and time.monotonic() > deadline:
                    done.left = await _pending_count(db)
                    break
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
    return (await db.fetchone("SELECT count(*) FROM hunt_pending"))[0]


async def _index(db: Database, batch: list[tuple], postings_per_day: int,
                 done: Indexed) -> None:
    """One transaction: the batch's postings written, its pending rows deleted."""
    keys = {"macs": [row[0] for row in batch], "kinds": [row[1] for row in batch],
            "times": [row[2] for row in batch]}
    bodies: dict[tuple, list[bytes]] = {}
    for mac, kind, received_at, body in await db.fetchall(hunt_db.PENDING_CHUNKS, keys):
        bodies.setdefault((mac, kind, received_at), []).append(body)
    tallied = await asyncio.to_thread(_tallied, batch, bodies)
    async with db.transaction() as cur, cur.connection.pipeline():  # one round trip
        for (mac, _, _, written_at), (postings, records) in zip(batch, tallied):
            done.uploads += 1
            done.records += records
            done.dropped += postings.budget.dropped
            params = postings.params(written_at)
            if params["rows"]:
                done.postings += len(params["rows"])
                statement, values = hunt_db.postings_statement(
                    {"mac": mac, "budget": postings_per_day, **params})
                await execute(cur, statement, values)
        await execute(cur, hunt_db.PENDING_DONE, keys)


def _tallied(batch: list[tuple], bodies: dict[tuple, list[bytes]]
             ) -> list[tuple[Postings, int]]:
    """Each pending upload's values and records, from its chunks (gone: retention or a
    removal came first, and nothing is posted)."""
    tallied = []
    for mac, kind, received_at, _ in batch:
        postings, records = Postings(), 0
        for body in bodies.get((mac, kind, received_at), ()):
            for line in decompress(body):
                postings.add(orjson.loads(line))
                records += 1
        tallied.append((postings, records))
    return tallied


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

