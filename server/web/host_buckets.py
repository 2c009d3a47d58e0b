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
starts again with a full bucket. Updates take no lock: two workers taking from one bucket in
the same microseconds may count once (a lost update), so a key can go past its limit by the
requests that land in such races, not by N times (two processes taking from one bucket in a
tight loop lost a quarter of their takes; between real requests, each a few hundred µs of
work, the window is the 3 µs of a take). A lock shared by the workers would make
every request wait for whichever worker holds it, descheduled on a busy host.

Kept rather than a library: the `limits` library shares its counters across processes only
through a storage server (Redis, Memcached, MongoDB), one more service to run and a round
trip a request; a mapped file costs about 3 µs a take here (a process's own dict, 1.2).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
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


def map_table_file(path: Path, tables: int) -> mmap.mmap:
    """The file mapped, shared with the other processes that map it."""
    descriptor = os.open(path, os.O_RDWR)
    try:
        if os.fstat(descriptor).st_size != table_bytes(tables):
            raise ValueError(f"{path} is not a table file of {tables} tables")
        return mmap.mmap(descriptor, table_bytes(tables))
    finally:
        os.close(descriptor)


def refilled(tokens: float, at: float, now: float, capacity: float, rate: float) -> float:
    """What a bucket that held `tokens` at `at` holds at `now` (every bucket's arithmetic,
    limits.py Buckets' too)."""
    return min(capacity, tokens + (now - at) * rate)


def seconds_short(count: float, tokens: float, capacity: float, rate: float) -> float:
    """The seconds until a bucket holding `tokens` holds `count` (at most its capacity)."""
    return (min(count, capacity) - tokens) / rate


def key_hash(key: str) -> int:
    """A key's 64-bit hash, the same in every process, never 0 (an empty slot)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(),
                          "little") | 1


class HostBuckets:
    """Limits.py Buckets' interface, over table `table` of a mapped table file."""

    def __init__(self, per_minute: int, mapping: mmap.mmap, table: int):
        self.capacity = float(per_minute)
        self._rate = per_minute / 60.0
        self._mapping = mapping
        self._offset = table * SLOTS * SLOT.size

    def available(self, key: str, now: float) -> float:
        return self._slot(key_hash(key), now)[1]

    def take(self, key: str, count: float, now: float) -> float:
        """Take `count` tokens: 0.0 when taken, else the seconds until they would be there
        (nothing is taken then)."""
        hashed = key_hash(key)
        place, tokens = self._slot(hashed, now)
        if tokens >= count:
            SLOT.pack_into(self._mapping, place, hashed, tokens - count, now)
            return 0.0
        return seconds_short(count, tokens, self.capacity, self._rate)

    def give_back(self, key: str, count: float, now: float) -> None:
        hashed = key_hash(key)
        place, tokens = self._slot(hashed, now)
        SLOT.pack_into(self._mapping, place, hashed, min(self.capacity, tokens + count), now)

    def _slot(self, hashed: int, now: float) -> tuple[int, float]:
        """Where the key's bucket is (or would go) and the tokens it holds now."""
        capacity, rate, mapping = self.capacity, self._rate, self._mapping
        home = hashed & (SLOTS - 1)
        free = fullest = -1
        most = -1.0
        for probe in range(PROBES):
            place = self._offset + ((home + probe) & (SLOTS - 1)) * SLOT.size
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
