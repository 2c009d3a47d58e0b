"""The hunt indexer: postings written from the stored chunks, out of the upload's transaction.

An upload stores its chunks and one `hunt_pending` row (migrations 0032, 0033, 0034: with
its record count, and for flows and plain alerts their triples, counted as ingestion checked
them: PendingUpload) in its own transaction and is acknowledged; the indexer takes (deletes)
the pending rows of a batch of uploads, reads the chunks of those announced without triples
in one stream, tallies their values (server/hunt/postings.py) and writes their postings
(server/hunt/sql.py, a statement an upload, pipelined), all in one transaction. So the
upload pays one small row for the index and a count of its triples, not the tally and the
postings' statement (a fifth of ingestion's time on alerts-only bodies), and the indexer
does not parse its records a second time; a crash at any moment leaves an upload pending or
indexed, never both or neither; a replayed upload stores no chunk and no pending row, so
adds no posting; a router removed meanwhile gets none back. Small uploads (the agent's
cadence: a few records every 10 s) share a transaction up to BATCH_RECORDS records; a larger
one is a batch alone. An upload tallies at most what its router's day has left of
HUNT_POSTINGS_PER_ROUTER_DAY (a router that does not count for the fleet yet: what the day of
the network it uploaded from has left, shared with every such router there, when less:
server/hunt/budget.py) (and POSTINGS_FREE more, for the values it posted earlier that
day; once the day has nothing left, the upload is not read and its records are only
counted), so its memory follows that, not its size, and the statement keeps the day within
the budget. A batch that fails is indexed again an upload a transaction, and the upload that
fails alone is set aside and logged by name: no upload holds up the others.

The routers are split among HUNT_INDEX_LANES lanes by their MAC's hash; a lane is one
connection and one advisory lock (under Citus row locks of a multi-shard read are refused),
so one indexer a lane across processes and hosts, and a router's uploads in order. The
lanes run every HUNT_INDEX_SECONDS in the process that runs the jobs, and before a hunt
(`caught_up`), so that a hunt sees every upload acknowledged before it was asked, or says
how many it could not wait for.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson

from engine.addresses import ALLOCATION_PREFIX, PER_ALLOCATION
from server.background import BackgroundTasks, pause
from server.hunt import sql as hunt_db
from server.db.jobs import lock_key
from server.db.pool import CONNECTIVITY_ERRORS, Database, Reads, execute, worker_away
from server.metrics import Metrics
from server.telemetry.chunks import decompress
from server.hunt.budget import HuntBudget
from server.hunt.config import HuntConfig
from server.hunt.postings import POSTINGS_FREE, Postings, PostingsBudget
from server.timestamps import utc_midnight

log = logging.getLogger("router_backend.hunt")

LOCK = "hunt-index"
LISTED_UPLOADS = 1_000  # pending uploads listed at a time
BATCH_RECORDS = 10_000  # at most, in the uploads of one transaction (a larger one alone)
TALLY_BYTES = 1 << 20  # compressed chunks held before they are tallied
HUNT_WAIT_SECONDS = 5.0  # how long a hunt waits for the indexer to catch up


@dataclass
class Indexed:
    uploads: int = 0
    records: int = 0
    postings: int = 0  # values offered to the index (new or added to)
    dropped: int = 0  # records carrying values past an upload's allowance or its router's day
    set_aside: int = 0  # uploads whose postings could not be written (logged, each)
    left: int = 0  # pending uploads not indexed (the deadline came first)

    def as_detail(self) -> dict:
        return dict(vars(self))


async def index_pending(db: Database, budget: HuntBudget, wait_seconds: float = 0.0,
                        lanes: int = 1) -> Indexed:
    """Index every upload pending when called, in batches, in each of `lanes` lanes (the
    routers split among them by their MAC's hash; each lane a connection and an advisory lock
    of its own). The loop runs the lanes at once; with `wait_seconds` (before a hunt) they
    are taken in turn, one connection at a time, each waited for while another process
    indexes it (up to then), and what the deadline leaves is counted in `left`. Without, a
    lane another process holds is left to it."""
    deadline = time.monotonic() + wait_seconds
    done = Indexed()
    until, anything = await db.fetchone(hunt_db.PENDING_NOW) or (None, False)
    if not anything:  # no lane's connection opened for nothing (every hunt asks first)
        return done
    plans = [_Lane(lane, lanes, until, deadline if wait_seconds else None)
             for lane in range(lanes)]
    if wait_seconds:
        finished = [await _index_lane(db, plan, budget, done) for plan in plans]
    else:
        finished = list(await asyncio.gather(*(_index_lane(db, plan, budget, done)
                                                for plan in plans)))
    if wait_seconds and not all(finished):
        done.left = (await db.fetchrow("SELECT count(*) FROM hunt_pending"))[0]
    return done


@dataclass(frozen=True)
class _Lane:
    number: int
    lanes: int
    until: Any  # the database's clock when the turn began: later uploads wait for the next
    deadline: float | None  # before a hunt: how long to wait for the lock and to work

    def late(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline


async def _index_lane(db: Database, lane: _Lane, budget: HuntBudget, done: Indexed) -> bool:
    """The lane's pending uploads indexed on its lock's own connection, a batch a
    transaction; False when its lock or the deadline did not allow all of them."""
    key = lock_key(f"{LOCK}:{lane.number}")
    async with db.session() as cur:
        if not await _locked(cur, key, lane):
            return False
        try:
            while pending := await Reads(cur).fetchall(hunt_db.PENDING, {
                    "until": lane.until, "limit": LISTED_UPLOADS, "lane": lane.number,
                    "lanes": lane.lanes}):
                for batch in batches(pending):
                    if await _index_batch(cur, batch, budget, db.timeout,
                                          done) is not None:
                        for upload in batch:  # one of them failed it: each alone, so that
                            await _index_alone(cur, upload, budget, db.timeout,
                                               done)  # only that one is set aside
                    if lane.late():
                        return False
        finally:
            await execute(cur, "SELECT pg_advisory_unlock(%s)", (key,))
    return True


def batches(pending: list[tuple]) -> list[list[dict]]:
    """The listed uploads (mac, kind, received_at, records), in their order, in batches of
    at most BATCH_RECORDS records (an upload with more alone): small uploads share a
    transaction, and the tally's memory follows the bound, not the fleet's cadence."""
    out: list[list[dict]] = []
    records = 0
    for mac, kind, received_at, count in pending:
        if not out or records + count > BATCH_RECORDS:
            out.append([])
            records = 0
        out[-1].append({"mac": mac, "kind": kind, "received_at": received_at})
        records += count
    return out


async def _locked(cur, key: int, lane: _Lane) -> bool:
    while True:
        await execute(cur, "SELECT pg_try_advisory_lock(%s)", (key,))
        if (await cur.fetchone())[0]:
            return True
        if lane.deadline is None or lane.late():
            return False
        await asyncio.sleep(0.05)


async def _index_alone(cur, upload: dict, budget: HuntBudget, timeout: float,
                       done: Indexed) -> None:
    """An upload of a batch that failed, in a transaction of its own: set aside, logged by
    name, when it fails again (a record the tally cannot read, a value the database
    refuses), so that it never holds up the others."""
    error = await _index_batch(cur, [upload], budget, timeout, done)
    if error is not None:
        await _set_aside(cur, upload, error)
        done.set_aside += 1


async def _index_batch(cur, batch: list[dict], budget: HuntBudget, timeout: float,
                       done: Indexed) -> Exception | None:
    """The batch's uploads in one transaction: their pending rows taken, their chunks read
    in one stream and tallied (on a thread: the event loop goes on), their postings written,
    one statement an upload, pipelined. A failure other than the database's going away
    rolls it all back, the rows pending again, and is returned."""
    try:
        async with cur.connection.transaction():
            taken = await _take(cur, batch)
            if not taken:  # taken by another, or their routers removed
                return None
            shares = await _NetworkShares.read(cur, taken, budget)
            tallies = await _tallied(cur, taken, budget, shares)
            statements = await asyncio.to_thread(_statements, tallies, budget, shares, cur)
            async with asyncio.timeout(timeout), cur.connection.pipeline():
                for statement in statements:
                    await cur.execute(statement)
            await shares.charge(cur)
    except Exception as error:
        if isinstance(error, CONNECTIVITY_ERRORS) or worker_away(error):
            raise  # the database away: the lane stops, the loop tries again at its turn
        return error
    for tally in tallies:
        done.uploads += 1
        done.records += tally.postings.records
        done.dropped += tally.postings.budget.dropped
        done.postings += len(tally.postings.counts)
    return None


@dataclass
class _Tally:
    mac: str
    written_at: Any
    network: str | None  # where the upload came from, kept with its router's day
    postings: Postings


async def _take(cur, batch: list[dict]) -> list[tuple]:
    """The batch's pending rows deleted (pipelined, each on its router's shard): (mac, kind,
    received_at, written_at, network, records, triples) of those still there."""
    await cur.executemany(hunt_db.TAKE_PENDING, batch, returning=True)
    taken = []
    async for _ in cur.results():
        taken.extend(await cur.fetchall())
    return taken


async def _tallied(cur, taken: list[tuple], budget: HuntBudget,
                   shares: _NetworkShares) -> list[_Tally]:
    """Each taken upload's values, tallied within what its router's day has left of the
    budget (a fresh router's: what its network's day has left, when less), and a free
    allowance more for the values it posted earlier that day (the statement adds no new one
    past the budget: it, not this bound of memory, keeps the day within the budget when one
    router has several uploads in a batch). An upload whose router's day has nothing left is
    not read: its records are counted as not indexed (so a flooding router costs the indexer
    a counter an upload, not a parse of each record). An upload announced with its triples
    (flows and plain alerts: PendingUpload) is tallied from them, its chunks not read."""
    tallies: dict[tuple, _Tally] = {}
    to_read = []
    for mac, kind, received_at, written_at, network, records, triples in taken:
        day = utc_midnight(written_at)
        left = max(0, budget.per_router_day - shares.router_used.get((mac, day), 0))
        if (shared := shares.share_of(mac, network)) is not None:
            left = min(left, shares.left[(shared, day)])
        tally = tallies[(mac, kind, received_at)] = _Tally(
            mac, written_at, network, Postings(PostingsBudget(left + POSTINGS_FREE)))
        if not left:
            tally.postings.left_unread(records)
        elif triples is not None:
            tally.postings.add_announced(triples, records)
        else:
            to_read.append((mac, kind, received_at))
    if to_read:
        await _tally_chunks(cur, to_read, tallies)
    return list(tallies.values())


def shared_network(network: str) -> str:
    """Where a fresh router's upload network shares its budget: the network itself (an IPv4
    /24), or for an IPv6 /48 its /32, one ISP's or tunnel broker's allocation, which gets
    PER_ALLOCATION budgets as the fleet counts PER_ALLOCATION of its /48s (a red team's ten
    free /48s of one /32 each took a budget of their own)."""
    parsed = ipaddress.ip_network(network)
    if parsed.version == 4:
        return network
    return str(parsed.supernet(new_prefix=ALLOCATION_PREFIX))


def _networks_in(shared: str) -> int:
    return 1 if ipaddress.ip_network(shared).version == 4 else PER_ALLOCATION


class _NetworkShares:
    """A batch's fresh routers (server/hunt/budget.py) and what their networks' days have
    left, those rows locked for the transaction; after the batch's statements, each network
    charged with what its fresh routers added (a router's day's growth, charged to the
    network of its first upload in the batch). Within the batch an upload may add at most
    what its network has left after the uploads before it took their values' count."""

    def __init__(self, router_used: dict, fresh: set[str], used: dict, per_day: int) -> None:
        self.router_used = router_used  # (mac, day): postings before the batch
        self.fresh = fresh
        self.left = {(network, day): max(0, per_day * _networks_in(network) - count)
                     for (network, day), count in used.items()}
        self._charged_to: dict[tuple, tuple] = {}  # (mac, day): (network, day)

    @classmethod
    async def read(cls, cur, taken: list[tuple], budget: HuntBudget) -> _NetworkShares:
        reads = Reads(cur)
        macs = [row[0] for row in taken]
        router_used = {(mac, day): count for mac, day, count in await reads.fetchall(
            hunt_db.DAYS_USED, {"macs": macs, "days": [utc_midnight(row[3]) for row in taken]})}
        fresh: set[str] = set()
        if budget.shared:
            fresh = {mac for (mac,) in await reads.fetchall(
                hunt_db.fresh_statement(budget.keyed),
                {"macs": sorted(set(macs)), "min_age": budget.fresh_age})}
        days = sorted({(shared_network(row[4]), utc_midnight(row[3])) for row in taken
                       if row[0] in fresh and row[4] is not None})
        used = {}
        if days:
            used = {(network, day): count for network, day, count in await reads.fetchall(
                hunt_db.LOCK_NETWORK_DAYS, {"networks": [network for network, _ in days],
                                            "days": [day for _, day in days]})}
        return cls(router_used, fresh, used, budget.per_router_day)

    def share_of(self, mac: str, network: str | None) -> str | None:
        """The network whose budget the router's upload from `network` shares; None when
        it has a budget of its own (it counts for the fleet, or the upload had no network)."""
        return shared_network(network) if mac in self.fresh and network is not None else None

    def allowance(self, tally: _Tally, rows: int) -> int | None:
        """What the tally's statement may add: None for a router with a budget of its own."""
        if (shared := self.share_of(tally.mac, tally.network)) is None:
            return None
        day = utc_midnight(tally.written_at)
        key = (shared, day)
        given = min(rows, self.left[key])
        self.left[key] -= given
        self._charged_to.setdefault((tally.mac, day), key)
        return given

    async def charge(self, cur) -> None:
        if not self._charged_to:
            return
        days = list(self._charged_to)
        after = {(mac, day): count for mac, day, count in await Reads(cur).fetchall(
            hunt_db.DAYS_USED, {"macs": [mac for mac, _ in days], "days": [d for _, d in days]})}
        added: dict[tuple, int] = {}
        for router_day, network_day in self._charged_to.items():
            growth = after.get(router_day, 0) - self.router_used.get(router_day, 0)
            added[network_day] = added.get(network_day, 0) + growth
        await execute(cur, hunt_db.CHARGE_NETWORK_DAYS, {
            "networks": [network for network, _ in added], "days": [day for _, day in added],
            "added": list(added.values())})


async def _tally_chunks(cur, uploads: list[tuple], tallies: dict[tuple, _Tally]) -> None:
    """The uploads' chunks (mac, kind, received_at), read in one stream and tallied on a
    thread, at most TALLY_BYTES held at a time."""
    bodies: list[tuple[_Tally, bytes]] = []
    held = 0
    async for mac, kind, received_at, body in cur.stream(hunt_db.UPLOADS_CHUNKS, {
            "first": min(row[2] for row in uploads), "last": max(row[2] for row in uploads),
            "macs": [row[0] for row in uploads], "kinds": [row[1] for row in uploads],
            "received": [row[2] for row in uploads]}):
        bodies.append((tallies[(mac, kind, received_at)], body))
        held += len(body)
        if held >= TALLY_BYTES:
            await asyncio.to_thread(_tally_all, bodies)
            bodies, held = [], 0
    await asyncio.to_thread(_tally_all, bodies)


def _tally_all(bodies: list[tuple[_Tally, bytes]]) -> None:
    for tally, body in bodies:
        for line in decompress(body):
            tally.postings.add(orjson.loads(line))


def _statements(tallies: list[_Tally], budget: HuntBudget, shares: _NetworkShares,
                cur) -> list[str]:
    """Each upload's postings statement, bound by `cur` (server/db/rows.py)."""
    out = []
    for tally in tallies:
        params = {**tally.postings.params(tally.written_at), "mac": tally.mac,
                  "budget": budget.per_router_day, "network": tally.network,
                  "dropped": tally.postings.budget.dropped}
        if params["rows"]:
            params["allowance"] = shares.allowance(tally, len(params["rows"]))
            out.append(hunt_db.postings_statement(params).text(cur))
        elif params["dropped"]:
            out.append(cur.mogrify(*hunt_db.unindexed_statement(params)))
    return out


async def _set_aside(cur, key: dict, error: Exception) -> None:
    async with cur.connection.transaction():
        await execute(cur, hunt_db.TAKE_PENDING, key)
    log.warning("hunt index: the upload of %s received at %s (%s) set aside, its records "
                "stored and not indexed: %s", key["mac"], key["received_at"].isoformat(),
                key["kind"], str(error).splitlines()[0] if str(error) else type(error).__name__)


class HuntIndexer:
    """The indexer's loop in the process that runs the jobs: every `seconds`, every pending
    upload indexed; a failure (the database away) tried again at the next turn, the pending
    rows kept."""

    def __init__(self, db: Database, config: HuntConfig, seconds: float,
                 metrics: Metrics) -> None:
        self._db = db
        self._budget = config.budget
        self._seconds = seconds
        self._lanes = config.lanes
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
                done = await index_pending(self._db, self._budget,
                                           lanes=self._lanes)
            except Exception as error:  # the database away, or a statement refused: the
                self._health.failed(error)  # loop lives on, its health metric says so
                continue
            self._health.succeeded()
            if done.dropped:
                log.warning("hunt index: %d records of %d uploads carried values past their "
                            "upload's allowance or their router's day, stored but not indexed",
                            done.dropped, done.uploads)


async def caught_up(db: Database, budget: HuntBudget, lanes: int) -> int:
    """Before a hunt: index what is pending, waiting up to HUNT_WAIT_SECONDS for an indexer
    at work; the uploads still pending then (the answer says so)."""
    return (await index_pending(db, budget, HUNT_WAIT_SECONDS, lanes)).left


def pending_note(left: int) -> list[str]:
    return [f"{left} upload(s) acknowledged before this hunt are not indexed yet: hunt "
            "again in a minute"] if left else []

