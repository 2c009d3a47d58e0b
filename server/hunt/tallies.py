"""Every router that saw each of many indicators, summed over a window in one pass over the
packed blocks: the threat-intelligence retro-hunt's read (server/intel/retro.py).

A hunt (sightings.py) keeps its earliest routers' postings to show them day by day. A
retro-hunt asks, for up to a whole feed's indicators over HUNT_RETENTION_DAYS, only each
router's first and last sighting, its days and its records, and which indicators more than
`cap` routers saw (those are held or read again on their own). So every block of the window
is read once for all the indicators, and the postings are folded into one row per
(indicator, router) as they come: memory follows the sightings, not the postings, and an
indicator past `cap` routers keeps nothing but that it is past. Reading the blocks once
rather than once per batch of indicators is what bounds its time: batches of 10,000 read
most blocks of the window ten times for a feed of 100,000.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from server.hunt import sql as hunt_db
from server.db.location import DatabaseLocation
from server.db.pool import Database, Reads, execute
from server.hunt.sightings import (_Gathered, _day_number, packed_reads, read_unpacked,
                                   value_hashes)

FOLD_AT = 1_000_000  # postings read before they are folded into the rows
DAYS_A_PROCESS = 20  # at least, for a range of packed days to be read by a process of its own
READ_TIMEOUT_SECONDS = 60  # a range's process: connecting, and each statement


@dataclass
class RouterTally:
    """One router's sightings of one indicator over the window."""
    mac: str
    first: datetime
    last: datetime
    days: int
    records: int


@dataclass
class Tallied:
    """One indicator's routers; none kept when `over` (more than `cap` saw it)."""
    routers: list[RouterTally]
    over: bool


_COLUMNS = ("slot", "number", "first_day", "day", "first", "last", "records", "days")


class _Folder:
    """Rows of (slot, router number): its first and last day seen, first and last second,
    records and days; postings read since the last fold wait beside them. Days are read in
    order, so two rows of one router met in a fold overlap at most on one day: the earlier
    one's last, the later one's first."""

    def __init__(self, slots: int, cap: int, removed: np.ndarray) -> None:
        self.cap = cap
        self.over = np.zeros(slots, dtype=bool)
        self.removed = removed
        self.rows = {name: np.zeros(0, dtype=np.int64) for name in _COLUMNS}
        self.parts: list[dict[str, np.ndarray]] = []
        self.held = 0

    def add(self, slot, number, day, first, last, records) -> None:
        self.add_rows({"slot": slot, "number": number, "first_day": day, "day": day,
                       "first": first, "last": last, "records": records,
                       "days": np.ones(len(slot), dtype=np.int64)})

    def add_rows(self, part: dict) -> None:
        """Postings (one day each), or the rows another folder folded from days after all
        of these."""
        kept = ~self.over[part["slot"]]
        if len(self.removed):
            kept &= ~np.isin(part["number"], self.removed)
        self.parts.append({name: np.asarray(part[name], dtype=np.int64)[kept]
                           for name in _COLUMNS})
        self.held += int(kept.sum())
        if self.held > FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """The postings held folded into rows of their own (one sort of them), then merged
        with the rows so far: both in the same order, so a stable sort of the two is one
        linear merge, not a sort of everything at every fold."""
        if not self.parts:
            return
        new = {name: np.concatenate([p[name] for p in self.parts]) for name in _COLUMNS}
        self.parts, self.held = [], 0
        new = _reduced(new, _order(new["slot"], new["number"], new["first_day"]))
        both = {name: np.concatenate([self.rows[name], new[name]]) for name in _COLUMNS}
        rows = _reduced(both, _order(both["slot"], both["number"], both["first_day"],
                                     merge=True))
        self.over |= np.bincount(rows["slot"], minlength=len(self.over)) > self.cap
        kept = ~self.over[rows["slot"]]
        self.rows = {name: column[kept] for name, column in rows.items()}


def _reduced(c: dict[str, np.ndarray], order: np.ndarray) -> dict[str, np.ndarray]:
    """One row per (slot, number) of rows in `order` (by slot, number, first day): a day
    where one row ends and the next begins is counted once."""
    c = {name: column[order] for name, column in c.items()}
    if not len(c["slot"]):
        return c
    slot, number = c["slot"], c["number"]
    same_key = (slot[1:] == slot[:-1]) & (number[1:] == number[:-1])
    keys = np.flatnonzero(np.r_[True, ~same_key])
    touching = np.r_[False, same_key & (c["day"][:-1] == c["first_day"][1:])]
    return {"slot": slot[keys], "number": number[keys],
            "first_day": np.minimum.reduceat(c["first_day"], keys),
            "day": np.maximum.reduceat(c["day"], keys),
            "first": np.minimum.reduceat(c["first"], keys),
            "last": np.maximum.reduceat(c["last"], keys),
            "records": np.add.reduceat(c["records"], keys),
            "days": np.add.reduceat(c["days"], keys)
            - np.add.reduceat(touching.astype(np.int64), keys)}


def _order(slot: np.ndarray, number: np.ndarray, day: np.ndarray,
           merge: bool = False) -> np.ndarray:
    """The order by (slot, number, day): one sort of a key packing the three (a third of a
    three-key lexsort's time), when they fit its 63 bits, as they do for a feed pass's
    slots, the routers' numbers (today's unnumbered ones are small negatives) and days
    since 1970 until 2149. `merge`: two runs already in that order, merged (stable)."""
    if len(slot) and slot.max() < 2**17 and number.min() > -2**29 and number.max() < 2**29 \
            and day.min() >= 0 and day.max() < 2**16:
        key = (slot << 46) | ((number + 2**29) << 16) | day
        return np.argsort(key, kind="stable") if merge else np.argsort(key)
    return np.lexsort((day, number, slot))


async def router_tallies(db: Database, asked: list[tuple[str, str]], slots: list[int],
                         indicators: int, since: datetime, until: datetime,
                         cap: int, processes: int = 1) -> list[Tallied]:
    """For each of `indicators` (slots: the indicator each asked value is one of), its
    routers over the days from `since` to `until`, or that more than `cap` saw it; read in
    one snapshot, the packed days by up to `processes` processes (each a range of them, in
    the same snapshot: `_read_range`)."""
    async with db.snapshot() as reads:
        removed = np.array([n for (n,) in await reads.fetchall(hunt_db.REMOVED_ROUTERS)],
                           dtype=np.int64)
        folder = _Folder(indicators, cap, removed)
        hashes = await value_hashes(reads, asked)
        ranges = _ranges(await reads.fetchall(hunt_db.PACKED_DAYS, {
            "since": since, "until": until}), min(processes, os.cpu_count() or 1))
        if len(ranges) > 1:
            await _read_in_processes(reads, db.location, ranges, hashes, slots, folder)
        else:
            await _read_packed(reads, hashes, slots, since, until, folder)
        provisional = await _read_unpacked(reads, asked, slots, indicators, since, until,
                                           folder)
        folder.fold()
        return await _named(reads, folder, provisional, indicators)


async def _read_packed(reads: Reads, hashes: list[int], slots: list[int], since: datetime,
                       until: datetime, folder: _Folder) -> None:
    """Every block's postings of the values asked, added to the folder a read at a time
    (a block at a time, the adding cost as much as the reading)."""
    slot_of = np.array(slots, dtype=np.int64)
    async for read in packed_reads(reads, hashes, since, until):
        columns: list[tuple[np.ndarray, ...]] = []
        for day, block, values, at in read:
            hit = at >= 0
            if not hit.any():
                continue
            which, routers, records, first, span = block.columns_of(at[hit])
            first = int(day.timestamp()) + first.astype(np.int64)
            columns.append((slot_of[values[hit]][which], routers,
                            np.full(len(which), _day_number(day)), first, first + span,
                            records))
        if columns:
            folder.add(*(np.concatenate(column) for column in zip(*columns)))


def _ranges(days: list[tuple], processes: int) -> list[tuple[datetime, datetime]]:
    """The packed days split into up to `processes` ranges of consecutive days (first, last),
    each of at least DAYS_A_PROCESS days."""
    count = max(1, min(processes, len(days) // DAYS_A_PROCESS))
    edges = np.linspace(0, len(days), count + 1).astype(int)
    return [(days[a][0], days[b - 1][0]) for a, b in zip(edges[:-1], edges[1:]) if b > a]


async def _read_in_processes(reads: Reads, location: DatabaseLocation,
                             ranges: list[tuple[datetime, datetime]], hashes: list[int],
                             slots: list[int], folder: _Folder) -> None:
    """Each range of days read and folded by a process of its own (spawned: this process
    runs an event loop and threads) in this transaction's snapshot, exported; the rows of
    each merged here."""
    snapshot = (await reads.fetchall("SELECT pg_export_snapshot()"))[0][0]
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ProcessPoolExecutor(
        len(ranges), mp_context=multiprocessing.get_context("spawn"))
    try:
        done = await asyncio.gather(*(loop.run_in_executor(
            pool, _read_range, location, snapshot, hashes, slots, first, last,
            len(folder.over), folder.cap, folder.removed) for first, last in ranges))
    finally:  # never waits here: a cancelled hunt's processes end with their range
        pool.shutdown(wait=False, cancel_futures=True)
    for rows, over in done:
        folder.over |= over
        folder.add_rows(rows)


def _read_range(location: DatabaseLocation, snapshot: str, hashes: list[int],
                slots: list[int], since: datetime, until: datetime, indicators: int,
                cap: int, removed: np.ndarray) -> tuple[dict, np.ndarray]:
    """In a process of its own: the packed days from `since` to `until`, read in the
    snapshot named and folded; the rows and which indicators went past `cap`."""
    async def read() -> tuple[dict, np.ndarray]:
        db = await Database.open(location, 1, 1, READ_TIMEOUT_SECONDS)
        try:
            async with db.snapshot() as reads:
                await execute(reads.cur, "SET TRANSACTION SNAPSHOT %s", (snapshot,))
                folder = _Folder(indicators, cap, removed)
                await _read_packed(reads, hashes, slots, since, until, folder)
                folder.fold()
                return folder.rows, folder.over
        finally:
            await db.close()
    return asyncio.run(read())


async def _read_unpacked(reads: Reads, asked: list[tuple[str, str]], slots: list[int],
                         indicators: int, since: datetime, until: datetime,
                         folder: _Folder) -> dict[int, str]:
    """The postings still in rows, at most cap + 1 routers a value; the MACs of routers
    numbered for this read only."""
    gathered = [_Gathered() for _ in range(indicators)]
    numbers: dict[str, int] = {}
    provisional: dict[int, str] = {}
    counts = await read_unpacked(reads, asked, slots, since, until, folder.cap + 1, gathered,
                                 numbers, provisional)
    for n, (one, count) in enumerate(zip(gathered, counts)):
        if count is not None:  # more routers than read
            folder.over[n] = True
        number, day, first, last, records = one.columns()
        if len(number):
            folder.add(np.full(len(number), n), number, day, first, last, records)
    return provisional


async def _named(reads: Reads, folder: _Folder, provisional: dict[int, str],
                 indicators: int) -> list[Tallied]:
    rows = folder.rows
    numbers = np.unique(rows["number"][rows["number"] >= 0]).tolist()
    macs = dict(await reads.fetchall(hunt_db.ROUTER_MACS, {"ids": numbers})) if numbers \
        else {}
    macs.update(provisional)
    found = [Tallied([], bool(over)) for over in folder.over]
    for slot, number, first, last, days, records in zip(
            *(rows[name].tolist() for name in ("slot", "number", "first", "last", "days",
                                               "records"))):
        if number in macs:  # else removed meanwhile
            found[slot].routers.append(RouterTally(
                macs[number], datetime.fromtimestamp(first, timezone.utc),
                datetime.fromtimestamp(last, timezone.utc), days, records))
    return found
