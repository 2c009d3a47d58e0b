"""Which routers saw each indicator asked, from both halves of the hunt index: the packed
days' blocks (server/telemetry/hunt_blocks.py) and the postings still in rows (today's, and
any day not packed yet). Each indicator's sightings are counted exactly (every router, every day of
the window) and its earliest are kept, as many as a page needs; the rest are counted, not
shaped.

Routers are the packed index's numbers (`hunt_routers`); a router whose postings are all
still in rows has no number yet and is given a negative one for the hunt's length. A router
removed (`hunt_removed_routers`) is left out everywhere.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

import numpy as np

from server.db import hunt as hunt_db
from server.db.pool import Database
from server.telemetry.hunt_blocks import decode
from server.telemetry.hunt_packing import bucket_of

BLOCKS_A_READ = 512  # asked of one statement, about: bounds a hunt's memory
UNIQUE_AT_MOST = 2_000_000  # past this, distinct routers are counted with a bitmap
EPOCH = date(1970, 1, 1)


@dataclass
class Seen:
    """One router's sightings of one indicator over the window."""
    number: int
    first: datetime
    last: datetime
    records: int
    days: list[date]
    mac: str = ""


@dataclass
class Sightings:
    """One indicator's: how many routers saw it (a lower bound when not `exact`) and the
    earliest of them, earliest first."""
    count: int
    exact: bool
    earliest: list[Seen]


@dataclass
class _Gathered:
    """One indicator's postings as read, in arrays by the read."""
    numbers: list[np.ndarray] = field(default_factory=list)
    days: list[np.ndarray] = field(default_factory=list)
    first: list[np.ndarray] = field(default_factory=list)
    last: list[np.ndarray] = field(default_factory=list)
    records: list[np.ndarray] = field(default_factory=list)

    def add(self, numbers, day: int, first, last, records) -> None:
        self.numbers.append(np.asarray(numbers, dtype=np.int64))
        self.days.append(np.full(len(self.numbers[-1]), day, dtype=np.int32))
        self.first.append(np.asarray(first, dtype=np.int64))
        self.last.append(np.asarray(last, dtype=np.int64))
        self.records.append(np.asarray(records, dtype=np.int64))

    def joined(self, other: "_Gathered") -> "_Gathered":
        return _Gathered(self.numbers + other.numbers, self.days + other.days,
                         self.first + other.first, self.last + other.last,
                         self.records + other.records)

    def of(self, numbers: np.ndarray) -> "_Gathered":
        """Only these routers' postings."""
        kept = _Gathered()
        for column in zip(self.numbers, self.days, self.first, self.last, self.records):
            picked = np.isin(column[0], numbers)
            kept.numbers.append(column[0][picked])
            kept.days.append(column[1][picked])
            kept.first.append(column[2][picked])
            kept.last.append(column[3][picked])
            kept.records.append(column[4][picked])
        return kept

    def columns(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
                     for parts in (self.numbers, self.days, self.first, self.last,
                                   self.records))


def _day_number(day: datetime) -> int:
    return (day.astimezone(timezone.utc).date() - EPOCH).days


async def value_hashes(db: Database, asked: list[tuple[str, str]]) -> list[int]:
    rows = await db.fetchall(hunt_db.HASHES, {"codes": [c for c, _ in asked],
                                              "values": [v for _, v in asked]})
    return [value_hash for (value_hash,) in rows]


async def read_packed(db: Database, hashes: list[int], since: datetime, until: datetime,
                      gathered: list[_Gathered]) -> None:
    """Every packed posting of the values hashed, from the days in the window."""
    days = await db.fetchall(hunt_db.PACKED_DAYS, {"since": since, "until": until})
    by_bits: dict[int, dict[int, list[int]]] = {}
    for bits in {bits for _, bits in days}:
        buckets = by_bits[bits] = defaultdict(list)
        for n, value_hash in enumerate(hashes):
            buckets[bucket_of(value_hash, bits)].append(n)
    start = 0
    while start < len(days):
        wanted: dict[tuple[datetime, int], list[int]] = {}
        while start < len(days) and len(wanted) < BLOCKS_A_READ:
            day, bits = days[start]
            for bucket, indicators in by_bits[bits].items():
                wanted[(day, bucket)] = indicators
            start += 1
        rows = await db.fetchall_binary(hunt_db.BLOCKS, {"days": [d for d, _ in wanted],
                                                  "buckets": [b for _, b in wanted]})
        for day, bucket, data in rows:
            block, number = decode(data), _day_number(day)
            base = int(day.timestamp())
            indicators = wanted[(day, bucket)]
            places = block.present(np.array([hashes[n] for n in indicators], dtype=np.int64))
            for n, at in zip(indicators, places.tolist()):
                if at >= 0:
                    found = block.postings_at(at)
                    first = base + found.first.astype(np.int64)
                    gathered[n].add(found.routers, number, first, first + found.span,
                                    found.records)


def _numbered(macs: set[str], numbers: dict[str, int],
              provisional: dict[int, str]) -> None:
    """A number for each MAC: its packed one, else a negative one for this hunt."""
    for mac in sorted(macs):
        if mac not in numbers:
            numbers[mac] = -1 - len(provisional)
            provisional[numbers[mac]] = mac


def _add_rows(gathered: list[_Gathered], rows, numbers: dict[str, int]) -> None:
    for n, mac, day, first, last, records in rows:
        gathered[n - 1].add((numbers[mac],), _day_number(day), (int(first.timestamp()),),
                            (int(last.timestamp()),), (records,))


async def read_unpacked(db: Database, asked: list[tuple[str, str]], since: datetime,
                        until: datetime, reads: int, gathered: list[_Gathered],
                        numbers: dict[str, int], provisional: dict[int, str]
                        ) -> list[int | None]:
    """The postings still in rows, at most `reads` an indicator, earliest first; for an
    indicator with more, how many routers they name (else None)."""
    params = {"codes": [c for c, _ in asked], "values": [v for _, v in asked],
              "since": since, "until": until, "reads": reads}
    rows = await db.fetchall(hunt_db.UNPACKED, params)
    macs = {row[1] for row in rows}
    if macs:
        numbers.update(await db.fetchall(hunt_db.ROUTER_IDS, {"macs": sorted(macs)}))
    _numbered(macs, numbers, provisional)
    _add_rows(gathered, rows, numbers)
    read = defaultdict(int)
    for row in rows:
        read[row[0] - 1] += 1
    counts: list[int | None] = [None] * len(asked)
    if any(count >= reads for count in read.values()):
        for n, count in await db.fetchall(hunt_db.UNPACKED_COUNTS, params):
            if read[n - 1] >= reads:
                counts[n - 1] = count
    return counts


async def _whole(db: Database, asked: tuple[str, str], n: int, chosen: Sightings,
                 since: datetime, until: datetime, packed: _Gathered,
                 numbers: dict[str, int]) -> _Gathered:
    """The postings of the routers chosen, every one of them: an indicator whose rows were
    read in part had only the earliest read."""
    macs = {number: mac for mac, number in numbers.items()}
    chosen_numbers = np.array([s.number for s in chosen.earliest], dtype=np.int64)
    rows = await db.fetchall(hunt_db.UNPACKED_OF_ROUTERS, {
        "code": asked[0], "value": asked[1], "since": since, "until": until, "n": n + 1,
        "macs": [macs[number] for number in chosen_numbers.tolist() if number in macs]})
    whole = [_Gathered()]
    _add_rows(whole, [(1, *row[1:]) for row in rows], numbers)
    return packed.of(chosen_numbers).joined(whole[0])


def _distinct(numbers: np.ndarray) -> int:
    if len(numbers) <= UNIQUE_AT_MOST:
        return int(np.unique(numbers).size)
    known = numbers[numbers >= 0]
    seen = np.zeros(int(known.max()) + 1 if len(known) else 1, dtype=bool)
    seen[known] = True
    return int(seen.sum()) + int(np.unique(numbers[numbers < 0]).size)


def settle(gathered: _Gathered, wanted: int, removed: np.ndarray,
           unpacked_count: int | None) -> Sightings:
    """One indicator's count and its `wanted` earliest routers, each with its whole
    window."""
    if not gathered.numbers:  # most indicators of a long list: never seen
        return Sightings(unpacked_count or 0, unpacked_count is None, [])
    numbers, days, first, last, records = gathered.columns()
    if len(removed) and len(numbers):
        kept = ~np.isin(numbers, removed)
        numbers, days, first, last, records = (c[kept] for c in (numbers, days, first, last,
                                                                  records))
    count = _distinct(numbers)
    exact = unpacked_count is None
    if not exact:
        count = max(count, unpacked_count)
    chosen = _earliest_numbers(numbers, first, wanted)
    picked = np.isin(numbers, chosen)
    return Sightings(count, exact, _per_router(numbers[picked], days[picked], first[picked],
                                               last[picked], records[picked]))


def _per_router(numbers, days, first, last, records) -> list[Seen]:
    """The postings of each router summed over the window, earliest first."""
    if not len(numbers):
        return []
    order = np.lexsort((days, numbers))
    numbers, days, first, last, records = (c[order] for c in (numbers, days, first, last,
                                                               records))
    starts = np.concatenate(([0], np.flatnonzero(np.diff(numbers)) + 1))
    ends = np.append(starts[1:], len(numbers))
    dates = {day: _date(day) for day in np.unique(days).tolist()}
    seen = [Seen(number, _moment(f), _moment(la), r,
                 [dates[d] for d in dict.fromkeys(days[start:end].tolist())])
            for number, f, la, r, start, end in zip(
                numbers[starts].tolist(), np.minimum.reduceat(first, starts).tolist(),
                np.maximum.reduceat(last, starts).tolist(),
                np.add.reduceat(records, starts).tolist(), starts.tolist(), ends.tolist())]
    return sorted(seen, key=lambda s: (s.first, s.number))


def _earliest_numbers(numbers: np.ndarray, first: np.ndarray, wanted: int) -> np.ndarray:
    """The `wanted` routers first seen earliest (ties by number): the smallest first times,
    taken in growing slices until they name enough routers."""
    if not len(numbers) or wanted <= 0:
        return np.zeros(0, dtype=np.int64)
    take = min(wanted, len(numbers))
    while True:
        if take < len(numbers):  # the `take` earliest, and every posting tied with them
            at = np.nonzero(first <= first[np.argpartition(first, take - 1)[take - 1]])[0]
        else:
            at = np.arange(len(numbers))
        ordered = at[np.lexsort((numbers[at], first[at]))]
        distinct = list(dict.fromkeys(numbers[ordered].tolist()))
        if len(distinct) >= wanted or take == len(numbers):
            return np.array(distinct[:wanted], dtype=np.int64)
        take = min(len(numbers), take * 4)


def _moment(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def _date(day: int) -> date:
    return EPOCH + timedelta(days=day)


async def sightings(db: Database, asked: list[tuple[str, str]], since: datetime,
                    until: datetime, wanted: int, unpacked_reads: int) -> list[Sightings]:
    """Each indicator's sightings over the days from `since` to `until` (first instants)."""
    packed = [_Gathered() for _ in asked]
    unpacked = [_Gathered() for _ in asked]
    numbers: dict[str, int] = {}
    provisional: dict[int, str] = {}
    await read_packed(db, await value_hashes(db, asked), since, until, packed)
    counts = await read_unpacked(db, asked, since, until, unpacked_reads, unpacked, numbers,
                                 provisional)
    removed = np.array([n for (n,) in await db.fetchall(hunt_db.REMOVED_ROUTERS)],
                       dtype=np.int64)
    found = []
    for n, count in enumerate(counts):
        one = settle(packed[n].joined(unpacked[n]), wanted, removed, count)
        if count is not None:  # the routers shown with every posting of theirs
            whole = settle(await _whole(db, asked[n], n, one, since, until, packed[n],
                                        numbers), wanted, removed, None)
            one = Sightings(one.count, False, whole.earliest)
        found.append(one)
    await _name(db, found, provisional)
    return found


async def _name(db: Database, found: list[Sightings], provisional: dict[int, str]) -> None:
    """Each router shown given its MAC, ties of time ordered by it; one whose number no
    longer names a router (removed while the hunt ran) is left out."""
    numbers = sorted({s.number for f in found for s in f.earliest if s.number >= 0})
    macs = dict(await db.fetchall(hunt_db.ROUTER_MACS, {"ids": numbers})) if numbers else {}
    macs.update(provisional)
    for f in found:
        f.earliest = [s for s in f.earliest if s.number in macs]
        for s in f.earliest:
            s.mac = macs[s.number]
        f.earliest.sort(key=lambda s: (s.first, s.mac))


async def router_days(db: Database, mac: str, asked: list[tuple[str, str]],
                      since: datetime, until: datetime) -> list[datetime]:
    """The days (first instants) on which the router's postings name any of the indicators:
    the console's drill-down reads its chunks for those days only."""
    gathered = [_Gathered() for _ in asked]
    await read_packed(db, await value_hashes(db, asked), since, until, gathered)
    rows = await db.fetchall(hunt_db.ROUTER_IDS, {"macs": [mac]})
    days = set(await hunt_db.router_days(db, mac, asked, since))
    if rows:
        for g in gathered:
            numbers, day_numbers, *_ = g.columns()
            days |= {datetime(d.year, d.month, d.day, tzinfo=timezone.utc) for d in
                     map(_date, day_numbers[numbers == rows[0][1]].tolist())}
    return sorted(days)
