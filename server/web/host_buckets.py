"""Token buckets shared by a host's HTTP workers: a table per limit in one file that the
supervisor makes afresh at each start (`make_table_file`) and each worker maps
(`map_table_file`), so that a router's requests count once against its limit whichever worker
answers them. Each process's own buckets (limits.py Buckets) gave a client that spreads its
requests over N workers N times its limit: with 16 workers, a hundred flooding MACs got the
allowance of 1,600.

A slot is (key hash, tokens, at), found by the key's hash among PROBES slots from its place.
A slot whose bucket has refilled to the brim is free again (a full bucket is as good as none).
When every slot probed holds a bucket still refilling (more keys active within the last
minute than the table holds near that place), the fullest of them is taken over: its key
starts again with a full bucket.

A take or a give-back holds a POSIX record lock (`fcntl.lockf`) on the key's PROBES slots
while it reads and writes them, so that requests of one router answered by several workers
at the same moment are each counted: without it, two processes taking from one bucket of
1,000 in a tight loop, each reading it while the other wrote it, got all 6,000 of their
takes. The lock covers only the slots a take may touch (a byte a slot, numbered apart from
the slots' bytes: record locks are advisory), so keys whose slots do not overlap never wait
for each other; it is held for the few µs of the arithmetic, and the kernel releases it if
its process dies. The probes do not wrap around the table's end, so that a key's slots are
one range.

Kept rather than a library: the `limits` library shares its counters across processes only
through a storage server (Redis, Memcached, MongoDB), one more service to run and a round
trip a request; a mapped file costs about 3 µs a take here, and its lock 3 more (a process's
own dict, 1.2).
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

SLOT = struct.Struct("=Qdd")  # key hash (0: empty), tokens, at (time.monotonic: host-wide)
SLOTS = 1 << 17  # a table's, a power of two: 3 MiB
PROBES = 8


def table_bytes(tables: int) -> int:
    return tables * SLOTS * SLOT.size


def make_table_file(path: Path, tables: int) -> None:
    """An empty file of `tables` tables (every slot empty: zeros), replacing one of an
    earlier start. Its blocks are allocated here: a sparse file's first write to a page on a
    full disk would kill the worker with SIGBUS; OSError (ENOSPC) here instead."""
    path.unlink(missing_ok=True)
    with path.open("wb") as table_file:
        os.posix_fallocate(table_file.fileno(), 0, table_bytes(tables))


@dataclass(frozen=True)
class TableFile:
    """A table file mapped by this process, and its descriptor, which stays open for the
    process's life: its record locks are released when any descriptor of the file it holds
    is closed."""
    mapping: mmap.mmap
    descriptor: int


def map_table_file(path: Path, tables: int) -> TableFile:
    """The file mapped, shared with the other processes that map it."""
    descriptor = os.open(path, os.O_RDWR)
    try:
        if os.fstat(descriptor).st_size != table_bytes(tables):
            raise ValueError(f"{path} is not a table file of {tables} tables")
        return TableFile(mmap.mmap(descriptor, table_bytes(tables)), descriptor)
    except BaseException:
        os.close(descriptor)
        raise


def refilled(tokens: float, at: float, now: float, capacity: float, rate: float) -> float:
    """What a bucket that held `tokens` at `at` holds at `now` (every bucket's arithmetic,
    limits.py Buckets' too)."""
    return min(capacity, tokens + (now - at) * rate)


def seconds_short(count: float, tokens: float, capacity: float, rate: float) -> float:
    """The seconds until a bucket holding `tokens` holds `count` (at most its capacity)."""
    return (min(count, capacity) - tokens) / rate


def _home(hashed: int) -> int:
    """The first of a key's PROBES slots, all within the table (no wrapping)."""
    return hashed % (SLOTS - PROBES + 1)


def key_hash(key: str) -> int:
    """A key's 64-bit hash, the same in every process, never 0 (an empty slot)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(),
                          "little") | 1


class HostBuckets:
    """Limits.py Buckets' interface, over table `table` of a mapped table file."""

    def __init__(self, per_minute: int, tables: TableFile, table: int):
        self.capacity = float(per_minute)
        self._rate = per_minute / 60.0
        self._mapping = tables.mapping
        self._descriptor = tables.descriptor
        self._offset = table * SLOTS * SLOT.size
        self._locks = table * SLOTS  # a lock's byte a slot (the locks are advisory: any range)

    def available(self, key: str, now: float) -> float:
        hashed = key_hash(key)
        return self._slot(hashed, _home(hashed), now)[1]

    def take(self, key: str, count: float, now: float) -> float:
        """Take `count` tokens: 0.0 when taken, else the seconds until they would be there
        (nothing is taken then)."""
        hashed = key_hash(key)
        home = _home(hashed)
        self._lock(home, fcntl.LOCK_EX)
        try:
            place, tokens = self._slot(hashed, home, now)
            if tokens >= count:
                SLOT.pack_into(self._mapping, place, hashed, tokens - count, now)
                return 0.0
        finally:
            self._lock(home, fcntl.LOCK_UN)
        return seconds_short(count, tokens, self.capacity, self._rate)

    def give_back(self, key: str, count: float, now: float) -> None:
        hashed = key_hash(key)
        home = _home(hashed)
        self._lock(home, fcntl.LOCK_EX)
        try:
            place, tokens = self._slot(hashed, home, now)
            SLOT.pack_into(self._mapping, place, hashed, min(self.capacity, tokens + count),
                           now)
        finally:
            self._lock(home, fcntl.LOCK_UN)

    def _lock(self, home: int, operation: int) -> None:
        fcntl.lockf(self._descriptor, operation, PROBES, self._locks + home)

    def _slot(self, hashed: int, home: int, now: float) -> tuple[int, float]:
        """Where the key's bucket is (or would go) and the tokens it holds now."""
        capacity, rate, mapping = self.capacity, self._rate, self._mapping
        free = fullest = -1
        most = -1.0
        for probe in range(PROBES):
            place = self._offset + (home + probe) * SLOT.size
            key, tokens, at = SLOT.unpack_from(mapping, place)
            if key == hashed:
                return place, refilled(tokens, at, now, capacity, rate)
            if free < 0:
                if key == 0:
                    free = place
                else:
                    held = refilled(tokens, at, now, capacity, rate)
                    if held >= capacity:
                        free = place
                    elif held > most:
                        fullest, most = place, held
        return (free if free >= 0 else fullest), capacity
