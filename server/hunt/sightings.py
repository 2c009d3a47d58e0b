"""Which routers saw each indicator asked, from both halves of the hunt index: the packed
days' blocks (server/hunt/blocks.py) and the postings still in rows (today's, and
any day not packed yet). Each indicator's sightings are counted exactly (every router, every day of
the window) and its earliest are kept, as many as a page needs; the rest are counted, not
shaped.

Routers are the packed index's numbers (`hunt_routers`); a router whose postings are all
still in rows has no number yet and is given a negative one for the hunt's length. A router
removed (`hunt_removed_routers`) is left out everywhere.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

import numpy as np

from server.hunt import sql as hunt_db
from server.db.pool import Database, Reads
from server.hunt.blocks import Block, decode
from server.hunt.packing import bucket_of

BLOCKS_A_READ = 512  # asked of one statement, about: bounds a hunt's memory
UNIQUE_AT_MOST = 2_000_000  # past this, distinct routers are counted with a bitmap
COMPACT_AT = 1_000_000  # postings a hunt holds, past which only each value's earliest
# routers' are kept
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
    # Set once the earliest routers are known for good (server/hunt/sightings.py _compact):
    # every router seen, of the postings let go since, and the routers kept.
    seen: np.ndarray | None = None
    chosen: np.ndarray | None = None

    def size(self) -> int:
        return sum(len(part) for part in self.numbers)

    def add(self, numbers, day: int, first, last, records) -> None:
        self.numbers.append(np.asarray(numbers, dtype=np.int64))
        self.days.append(np.full(len(self.numbers[-1]), day, dtype=np.int32))
        self.first.append(np.asarray(first, dtype=np.int64))
        self.last.append(np.asarray(last, dtype=np.int64))
        self.records.append(np.asarray(records, dtype=np.int64))

    def joined(self, other: "_Gathered") -> "_Gathered":
        return _Gathered(self.numbers + other.numbers, self.days + other.days,
                         self.first + other.first, self.last + other.last,
                         self.records + other.records, self.seen, self.chosen)

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


async def value_hashes(reads: Reads, asked: list[tuple[str, str]]) -> list[int]:
    rows = await reads.fetchall(hunt_db.HASHES, {"codes": [c for c, _ in asked],
                                                 "values": [v for _, v in asked]})
    return [value_hash for (value_hash,) in rows]


PackedRead = list[tuple[datetime, Block, np.ndarray, np.ndarray]]


async def packed_reads(reads: Reads, hashes: list[int], since: datetime,
                       until: datetime) -> AsyncIterator[PackedRead]:
    """The packed blocks that may hold the values hashed, from the days in the window,
    oldest first, about BLOCKS_A_READ a statement: for each statement's blocks, each one's
    day, the block, the values (their places in `hashes`) of its bucket, and where each of
    them is in the block (-1: not there)."""
    days = await reads.fetchall(hunt_db.PACKED_DAYS, {"since": since, "until": until})
    hash_of = np.array(hashes, dtype=np.int64)
    by_bits: dict[int, dict[int, np.ndarray]] = {}
    for bits in {bits for _, bits in days}:
        buckets = np.array([bucket_of(h, bits) for h in hashes], dtype=np.int64)
        order = np.argsort(buckets, kind="stable")
        found, starts = np.unique(buckets[order], return_index=True)
        by_bits[bits] = dict(zip(found.tolist(), np.split(order, starts[1:])))
    start = 0
    while start < len(days):
        blocks: dict[tuple[datetime, int], np.ndarray] = {}
        while start < len(days) and len(blocks) < BLOCKS_A_READ:
            day, bits = days[start]
            for bucket, values in by_bits[bits].items():
                blocks[(day, bucket)] = values
            start += 1
        rows = await reads.fetchall_binary(hunt_db.BLOCKS, {
            "days": [d for d, _ in blocks], "buckets": [b for _, b in blocks]})
        rows.sort(key=lambda row: row[:2])  # oldest first, as promised to the readers
        read = []
        for day, bucket, data in rows:
            values, block = blocks[(day, bucket)], decode(data)
            read.append((day, block, values, block.present(hash_of[values])))
        yield read


async def read_packed(reads: Reads, hashes: list[int], since: datetime, until: datetime,
                      gathered: list[_Gathered], wanted: int | None = None,
                      removed: np.ndarray | None = None,
                      slots: list[int] | None = None) -> None:
    """Every packed posting of the values hashed, from the days in the window, oldest
    first; with `wanted`, a value's postings past COMPACT_AT are let go but its `wanted`
    earliest routers' (its count kept), so that a value every router sees costs a bitmap
    of the fleet, not every posting of the window. `slots`: the indicator each value is
    one of (a network's addresses are one indicator); by default each its own."""
    slots = slots if slots is not None else list(range(len(hashes)))
    held = sum(g.size() for g in gathered)  # kept up as postings are added: no sum a read
    compact_at = COMPACT_AT
    async for read in packed_reads(reads, hashes, since, until):
        for day, block, values, places in read:
            number, base = _day_number(day), int(day.timestamp())
            for n, at in zip(values.tolist(), places.tolist()):
                if at >= 0:
                    found = block.postings_at(at)
                    first = base + found.first.astype(np.int64)
                    gathered[slots[n]].add(found.routers, number, first,
                                           first + found.span, found.records)
                    held += len(found.routers)
        if wanted is not None and held > compact_at:
            for g in gathered:
                if g.size() > 2 * wanted:
                    _compact(g, wanted, removed if removed is not None else np.zeros(0))
            held = sum(g.size() for g in gathered)
            # Many values of a few routers each let nothing go: look again only once the
            # postings held have doubled, not after every read.
            compact_at = max(COMPACT_AT, 2 * held)


def _compact(gathered: _Gathered, wanted: int, removed: np.ndarray) -> None:
    """A value many routers saw, its postings let go but the earliest routers': the days are
    read oldest first, so once `wanted` routers are known, no router first seen on a later
    day comes before them. Every router seen is kept in a bitmap, for the count."""
    numbers, days, first, last, records = gathered.columns()
    seen = gathered.seen if gathered.seen is not None else np.zeros(0, dtype=bool)
    if len(numbers) and numbers.max() >= len(seen):
        seen = np.concatenate((seen, np.zeros(int(numbers.max()) + 1 - len(seen), dtype=bool)))
    seen[numbers] = True
    if gathered.chosen is None:
        eligible = ~np.isin(numbers, removed) if len(removed) else np.ones(len(numbers), bool)
        chosen = _earliest_numbers(numbers[eligible], first[eligible], wanted)
        if len(chosen) < wanted:
            return  # fewer routers than a page: nothing to let go
        gathered.chosen = chosen
    gathered.seen = seen
    kept = np.isin(numbers, gathered.chosen)
    gathered.numbers, gathered.days, gathered.first, gathered.last, gathered.records = (
        [column[kept]] for column in (numbers, days, first, last, records))


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


async def read_unpacked(reads: Reads, asked: list[tuple[str, str]], slots: list[int],
                        since: datetime, until: datetime, at_most: int,
                        gathered: list[_Gathered], numbers: dict[str, int],
                        provisional: dict[int, str]) -> list[int | None]:
    """The postings still in rows, at most `at_most` a value, earliest first; for an
    indicator (a slot) with a value of more, how many routers they name at least (else
    None)."""
    params = {"codes": [c for c, _ in asked], "values": [v for _, v in asked],
              "since": since, "until": until, "reads": at_most}
    rows = await reads.fetchall(hunt_db.UNPACKED, params)
    macs = {row[1] for row in rows}
    if macs:
        numbers.update(await reads.fetchall(hunt_db.ROUTER_IDS, {"macs": sorted(macs)}))
    _numbered(macs, numbers, provisional)
    _add_rows(gathered, [(slots[row[0] - 1] + 1, *row[1:]) for row in rows], numbers)
    read: dict[int, int] = defaultdict(int)
    for row in rows:
        read[row[0] - 1] += 1
    counts: list[int | None] = [None] * len(gathered)
    if any(count >= at_most for count in read.values()):
        for n, count in await reads.fetchall(hunt_db.UNPACKED_COUNTS, params):
            if read[n - 1] >= at_most:
                slot = slots[n - 1]
                counts[slot] = max(counts[slot] or 0, count)
    return counts


async def _whole(reads: Reads, values: list[tuple[str, str]], chosen: Sightings,
                 since: datetime, until: datetime, packed: _Gathered,
                 numbers: dict[str, int]) -> _Gathered:
    """The postings of the routers chosen, every one of them: an indicator whose rows were
    read in part had only the earliest read."""
    macs = {number: mac for mac, number in numbers.items()}
    chosen_numbers = np.array([s.number for s in chosen.earliest], dtype=np.int64)
    whole = [_Gathered()]
    for code, value in values:
        rows = await reads.fetchall(hunt_db.UNPACKED_OF_ROUTERS, {
            "code": code, "value": value, "since": since, "until": until, "n": 1,
            "macs": [macs[number] for number in chosen_numbers.tolist() if number in macs]})
        _add_rows(whole, rows, numbers)
    return packed.of(chosen_numbers).joined(whole[0])


def _distinct(numbers: np.ndarray, seen_before: np.ndarray | None,
              removed: np.ndarray) -> int:
    """Routers among `numbers` and those `seen_before` (a bitmap), less the removed."""
    if seen_before is None and len(numbers) <= UNIQUE_AT_MOST:
        return int(np.unique(numbers).size)
    known = numbers[numbers >= 0]
    size = max(int(known.max()) + 1 if len(known) else 0,
               len(seen_before) if seen_before is not None else 0, 1)
    seen = np.zeros(size, dtype=bool)
    if seen_before is not None:
        seen[:len(seen_before)] = seen_before
    seen[known] = True
    if len(removed):
        seen[removed[removed < size]] = False
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
    count = _distinct(numbers, gathered.seen, removed)
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
    """The `wanted` routers first seen earliest, and every router tied with the last of them
    (to the second): the smallest first times, taken in growing slices until they name
    enough routers. Ties are cut later, by MAC (_name), an order both halves agree on."""
    if not len(numbers) or wanted <= 0:
        return np.zeros(0, dtype=np.int64)
    take = min(wanted, len(numbers))
    while True:
        if take < len(numbers):  # the `take` earliest, and every posting tied with them
            at = np.nonzero(first <= first[np.argpartition(first, take - 1)[take - 1]])[0]
        else:
            at = np.arange(len(numbers))
        ordered = at[np.lexsort((numbers[at], first[at]))]
        earliest: dict[int, int] = {}
        for number, when in zip(numbers[ordered].tolist(), first[ordered].tolist()):
            if number not in earliest:
                if len(earliest) >= wanted and when > last:
                    break
                earliest[number] = last = when
        if len(earliest) >= wanted or take == len(numbers):
            return np.array(list(earliest), dtype=np.int64)
        take = min(len(numbers), take * 4)


def _moment(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def _date(day: int) -> date:
    return EPOCH + timedelta(days=day)


async def sightings(db: Database, asked: list[tuple[str, str]], slots: list[int],
                    since: datetime, until: datetime, wanted: int,
                    unpacked_reads: int) -> list[Sightings]:
    """Each indicator's sightings over the days from `since` to `until` (first instants),
    read in one snapshot: a day packed meanwhile is read once, in rows or in blocks.
    `asked`: the index's values; `slots`: the indicator each is one of."""
    async with db.snapshot() as reads:
        return await _sightings(reads, asked, slots, since, until, wanted, unpacked_reads)


async def _sightings(reads: Reads, asked: list[tuple[str, str]], slots: list[int],
                     since: datetime, until: datetime, wanted: int,
                     unpacked_reads: int) -> list[Sightings]:
    indicators = max(slots) + 1 if slots else 0
    packed = [_Gathered() for _ in range(indicators)]
    unpacked = [_Gathered() for _ in range(indicators)]
    numbers: dict[str, int] = {}
    provisional: dict[int, str] = {}
    removed = np.array([n for (n,) in await reads.fetchall(hunt_db.REMOVED_ROUTERS)],
                       dtype=np.int64)
    await read_packed(reads, await value_hashes(reads, asked), since, until, packed, wanted,
                      removed, slots)
    counts = await read_unpacked(reads, asked, slots, since, until, unpacked_reads,
                                 unpacked, numbers, provisional)
    found = []
    for n, count in enumerate(counts):
        one = settle(packed[n].joined(unpacked[n]), wanted, removed, count)
        if count is not None:  # the routers shown with every posting of theirs
            values = [value for value, slot in zip(asked, slots) if slot == n]
            whole = settle(await _whole(reads, values, one, since, until, packed[n],
                                        numbers), wanted, removed, None)
            one = Sightings(one.count, False, whole.earliest)
        found.append(one)
    await _name(reads, found, provisional, wanted)
    return found


async def _name(reads: Reads, found: list[Sightings], provisional: dict[int, str],
                wanted: int) -> None:
    """Each router shown given its MAC, and the earliest `wanted` kept, ties of time by MAC
    (the counting keeps every router tied with the last one); one whose number no longer
    names a router (removed meanwhile) is left out."""
    numbers = sorted({s.number for f in found for s in f.earliest if s.number >= 0})
    macs = dict(await reads.fetchall(hunt_db.ROUTER_MACS, {"ids": numbers})) if numbers \
        else {}
    macs.update(provisional)
    for f in found:
        f.earliest = [s for s in f.earliest if s.number in macs]
        for s in f.earliest:
            s.mac = macs[s.number]
        f.earliest.sort(key=lambda s: (s.first, s.mac))
        del f.earliest[wanted:]


async def router_days(db: Database, mac: str, asked: list[tuple[str, str]],
                      since: datetime, until: datetime) -> list[datetime]:
    """The days (first instants) on which the router's postings name any of the indicators:
    the console's drill-down reads its chunks for those days only."""
    gathered = [_Gathered() for _ in asked]
    async with db.snapshot() as reads:
        await read_packed(reads, await value_hashes(reads, asked), since, until, gathered)
        rows = await reads.fetchall(hunt_db.ROUTER_IDS, {"macs": [mac]})
        days = set(await hunt_db.router_days(reads, mac, asked, since))
    if rows:
        for g in gathered:
            numbers, day_numbers, *_ = g.columns()
            days |= {datetime(d.year, d.month, d.day, tzinfo=timezone.utc) for d in
                     map(_date, day_numbers[numbers == rows[0][1]].tolist())}
    return sorted(days)
