"""One chunk: a router's records of one kind, as received, one per line, compressed with
zstd, and the uploads they came in (each upload's receive time and record count, oldest
first), so every record keeps its own receive time through merges.

zstd rather than PostgreSQL's TOAST compression: on the corpus's EVE records a chunk of 200
takes about 50 bytes a record with zstd (level 1), 38 in chunks of 1,000 (level 9, as lines),
against 123 with TOAST's lz4 and 159 with pglz (docs/telemetry.md); PostgreSQL cannot
decompress it, so records are read back through this module (export, and
`router-backend telemetry sql`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import zstandard

from server.telemetry import columns

INGEST_LEVEL = 1      # on the request path: the fastest, and on EVE records as dense as 3
# Full chunks and a closed day's, written once by the compaction job: laid out by column,
# level 15 (zstd's first optimal-parsing level) takes 15 % fewer bytes than 9 on the storage
# benchmark's records (28.1 against 33.0 a record; 11 % on the corpus's) for 15 us a record
# more, once; 16 and beyond take no fewer (python -m bench.chunk_layout --levels).
COMPACT_LEVEL = 15


@dataclass(frozen=True)
class Chunk:
    """What a chunk row holds, uncompressed: `lines` are the records (bytes, no newline)."""
    lines: list[bytes]
    upload_times: list[datetime]
    upload_records: list[int]

    @property
    def received_at(self) -> datetime:
        return self.upload_times[-1]

    @property
    def first_received_at(self) -> datetime:
        return self.upload_times[0]

    def params(self, body: bytes) -> dict:
        """The chunk row's values (server/telemetry/sql.py), with its compressed `body`."""
        return {"received_at": self.received_at, "first_received_at": self.first_received_at,
                "records": len(self.lines), "upload_times": self.upload_times,
                "upload_records": self.upload_records, "body": body}

    def record_times(self) -> Iterator[datetime]:
        """Each record's receive time, in the order of `lines`."""
        for moment, count in zip(self.upload_times, self.upload_records):
            for _ in range(count):
                yield moment


def one_line(raw: bytes) -> bytes:
    """A record on one line: a JSON text holds a newline only as whitespace between tokens
    (inside strings it is escaped), so replacing it with a space keeps the same value."""
    return raw.replace(b"\n", b" ") if b"\n" in raw else raw


def compress(lines: list[bytes], level: int = INGEST_LEVEL) -> bytes:
    """The records one per line; a chunk written once (COMPACT_LEVEL: a full chunk, a closed
    day's) laid out by column first (columns.py: 25 % fewer bytes than lines at the same
    level on the benchmark's records, for twice the CPU), since it is never rewritten;
    the chunks of uploads and the day's remainders, rewritten by the next merge, stay as
    lines."""
    text = (columns.encode(lines) if level >= COMPACT_LEVEL
            else b"\n".join(lines) + b"\n")
    return zstandard.ZstdCompressor(level=level).compress(text)


def decompress(body: bytes) -> list[bytes]:
    """The records of a chunk of either layout."""
    text = zstandard.ZstdDecompressor().decompress(body)
    if text.startswith(columns.MAGIC):
        return columns.decode(text)
    return text.split(b"\n")[:-1]


def merged(chunks: list[Chunk]) -> Chunk:
    """Chunks in order as one: records and uploads concatenated (an upload split over two
    chunks stays two entries with the same time)."""
    return Chunk([line for chunk in chunks for line in chunk.lines],
                 [moment for chunk in chunks for moment in chunk.upload_times],
                 [count for chunk in chunks for count in chunk.upload_records])


def split(chunk: Chunk, size: int) -> list[Chunk]:
    """`chunk` cut into chunks of at most `size` records, in order."""
    pieces, lines, times, counts = [], [], [], []
    offset = 0
    for moment, count in zip(chunk.upload_times, chunk.upload_records):
        remaining = count
        while remaining:
            take = min(remaining, size - len(lines))
            lines += chunk.lines[offset:offset + take]
            times.append(moment)
            counts.append(take)
            offset += take
            remaining -= take
            if len(lines) == size:
                pieces.append(Chunk(lines, times, counts))
                lines, times, counts = [], [], []
    if lines:
        pieces.append(Chunk(lines, times, counts))
    return pieces
