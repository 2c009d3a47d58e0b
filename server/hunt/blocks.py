"""The packed hunt index's block: one day's postings of the values whose hash falls in one
bucket, as compressed columns (migration 0030, server/hunt/packing.py).

A posting is (value, router, day) with the first and last time an upload carrying the value
was received that day and how many records carried it. In a block the postings are sorted
by the value's 64-bit hash (PostgreSQL's hashtextextended of the kind's code and the stored
value), then by the router's dense number (`hunt_routers`), and kept as columns:

| column    | type   | what                                                           |
|-----------|--------|----------------------------------------------------------------|
| hashes    | int64  | each value's hash, once, sorted (the value itself is not kept) |
| starts    | uint32 | where each value's postings begin, and the end                 |
| routers   | uint32 | the router's number, less the previous one's of the same value |
| records   | uint32 | records that carried it that day                               |
| first     | uint32 | seconds from the day's start to the first upload carrying it   |
| span      | uint32 | seconds from that to the last                                  |

Each column's bytes are regrouped by significance (all first bytes, then all second bytes,
...) before the whole is compressed with zstd: small numbers leave planes of zeros, which
compress to nearly nothing. A value is found by a binary search of `hashes`, and only its
slice is read.

Why our own format: PostgreSQL's array and GIN types cannot hold these columns under 10
bytes a posting with their times, and the maintained bitmap libraries (roaring) hold only
the routers; this is numpy's arrays and zstd, with a few lines of layout.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import zstandard

MAGIC = b"HP1"
_HEADER = struct.Struct("<3sII")  # magic, values, postings
ZSTD_LEVEL = 6


@dataclass
class Postings:
    """Postings as parallel arrays, sorted by (hash, router) when packed."""
    hashes: np.ndarray   # int64, a value's hash per posting
    routers: np.ndarray  # uint32, the router's number
    records: np.ndarray  # uint32
    first: np.ndarray    # uint32, seconds into the day
    span: np.ndarray     # uint32, last - first, seconds

    def __len__(self) -> int:
        return len(self.routers)


def _planes(column: np.ndarray) -> bytes:
    return column.view(np.uint8).reshape(-1, column.itemsize).T.tobytes()


def _unplanes(data: memoryview, count: int, dtype) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    planes = np.frombuffer(data, dtype=np.uint8, count=count * width).reshape(width, count)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(count)


def encode(postings: Postings) -> bytes:
    """One block from postings sorted by (hash, router)."""
    hashes, starts = np.unique(postings.hashes, return_index=True)
    starts = np.append(starts, len(postings)).astype(np.uint32)
    deltas = postings.routers.astype(np.int64)
    deltas[1:] -= postings.routers[:-1]
    deltas[starts[:-1]] = postings.routers[starts[:-1]]  # each value's first: absolute
    body = b"".join((_planes(hashes.astype(np.int64)), _planes(starts),
                     _planes(deltas.astype(np.uint32)), _planes(postings.records),
                     _planes(postings.first), _planes(postings.span)))
    header = _HEADER.pack(MAGIC, len(hashes), len(postings))
    return header + zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(body)


class Block:
    """A block read back: its hashes whole, its other columns read only for the value
    asked (`find`), so that a rare value costs a few bytes of each column, not the block."""

    def __init__(self, body: memoryview, values: int, postings: int) -> None:
        self.body, self.postings = body, postings
        self.hashes = _unplanes(body[:values * 8], values, np.int64)
        self.starts = _unplanes(body[values * 8:values * 12 + 4], values + 1, np.uint32)
        self._columns_at = values * 12 + 4

    def _slice(self, column: int, start: int, end: int) -> np.ndarray:
        """Rows start to end of a uint32 column (0 routers, 1 records, 2 first, 3 span)."""
        at = self._columns_at + column * self.postings * 4
        planes = np.frombuffer(self.body, dtype=np.uint8, count=self.postings * 4,
                               offset=at).reshape(4, self.postings)[:, start:end]
        return np.ascontiguousarray(planes.T).view(np.uint32).reshape(end - start)

    def find(self, value_hash: int) -> Postings | None:
        found = self.present(np.array([value_hash], dtype=np.int64))
        return self.postings_at(int(found[0])) if found[0] >= 0 else None

    def present(self, value_hashes: np.ndarray) -> np.ndarray:
        """For each hash asked, where its value is in the block, or -1: one search for
        all of a hunt's indicators."""
        at = np.searchsorted(self.hashes, value_hashes)
        inside = at < len(self.hashes)
        hit = np.zeros(len(value_hashes), dtype=bool)
        hit[inside] = self.hashes[at[inside]] == value_hashes[inside]
        return np.where(hit, at, -1)

    def postings_at(self, at: int) -> Postings:
        """The postings of the block's `at`-th value."""
        value_hash = int(self.hashes[at])
        start, end = int(self.starts[at]), int(self.starts[at + 1])
        routers = np.cumsum(self._slice(0, start, end), dtype=np.uint32)
        return Postings(np.full(end - start, value_hash, dtype=np.int64), routers,
                        self._slice(1, start, end), self._slice(2, start, end),
                        self._slice(3, start, end))

    def columns_of(self, ats: np.ndarray) -> tuple[np.ndarray, ...]:
        """The postings of several of the block's values at once (their places, from
        `present`): which of `ats` each posting is of, then its router, records, first and span
        (the retro-hunt reads many values of each block; a hunt reads a few)."""
        starts = self.starts.astype(np.int64)
        begin, end = starts[ats], starts[ats + 1]
        lengths = end - begin
        offsets = np.cumsum(lengths) - lengths  # where each value's postings begin in the result
        rows = np.repeat(begin - offsets, lengths) + np.arange(int(lengths.sum()))
        deltas = self._slice(0, 0, self.postings)[rows].astype(np.int64)
        running = np.cumsum(deltas)
        before = np.repeat(running[offsets] - deltas[offsets], lengths)  # the sum ahead of each
        which = np.repeat(np.arange(len(ats)), lengths)
        return (which, running - before, self._slice(1, 0, self.postings)[rows],
                self._slice(2, 0, self.postings)[rows], self._slice(3, 0, self.postings)[rows])


def decode(data: bytes) -> Block:
    magic, values, postings = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("not a hunt block")
    body = zstandard.ZstdDecompressor().decompress(data[_HEADER.size:])
    if len(body) != values * 12 + 4 + postings * 16:
        raise ValueError("a hunt block of the wrong length")
    return Block(memoryview(body), values, postings)
