"""A chunk written once laid out by column (server/telemetry/columns.py) against the same
records one per line (the reference, the same run), both at COMPACT_LEVEL: bytes a record,
and CPU a 1,000 records to write (layout and compression) and to read back.

    python -m bench.chunk_layout [--records 50000] [--body 500] [--rounds 3]
                                     [--levels 9,12,14,15,16]

Two sets of records, split by kind as routers send them and cut into bodies of --body (a
router's day at the agent's cadence is one body of about 500 a kind): the storage
benchmark's stream (the corpus and variants of it with fresh flow ids, ports, times and
counters: bench/storage.py), and the corpus's own records alone. Times are CPU
seconds of this process, the best of --rounds, each layout timed in turn. --levels: the
column layout compressed at each zstd level named, against COMPACT_LEVEL's (the level the
job writes at) in the same run: bytes a record and the compression's own CPU.
"""

from __future__ import annotations

import argparse
import sys
import time

import zstandard

from bench.storage import corpus_lines, record_stream
from server.telemetry import columns
from server.telemetry.chunks import COMPACT_LEVEL, compress, decompress


def bodies_of(stream: list[tuple[str, bytes]], body: int) -> list[list[bytes]]:
    by_kind: dict[str, list[bytes]] = {}
    for kind, line in stream:
        by_kind.setdefault(kind, []).append(line)
    return [lines[start:start + body] for lines in by_kind.values()
            for start in range(0, len(lines), body)]


def as_lines(lines: list[bytes]) -> bytes:
    return zstandard.ZstdCompressor(level=COMPACT_LEVEL).compress(b"\n".join(lines) + b"\n")


def lines_back(body: bytes) -> list[bytes]:
    return zstandard.ZstdDecompressor().decompress(body).split(b"\n")[:-1]


def best_seconds(work, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


def measure(bodies: list[list[bytes]], rounds: int) -> dict[str, tuple[float, float, float]]:
    """layout -> (bytes a record, ms to write a 1,000 records, ms to read them back)."""
    records = sum(len(lines) for lines in bodies)
    out = {}
    for name, write, read in (("lines", as_lines, lines_back),
                              ("columns", lambda lines: compress(lines, COMPACT_LEVEL),
                               decompress)):
        written = [write(lines) for lines in bodies]
        assert [read(body) for body in written] == bodies, name
        out[name] = (sum(map(len, written)) / records,
                     best_seconds(lambda: [write(lines) for lines in bodies], rounds)
                     / records * 1e6,
                     best_seconds(lambda: [read(body) for body in written], rounds)
                     / records * 1e6)
    return out


def report(title: str, figures: dict[str, tuple[float, float, float]]) -> None:
    (size, write, read), (col_size, col_write, col_read) = figures["lines"], figures["columns"]
    print(f"{title}: one per line {size:.1f} bytes a record, written {write:.1f} ms and read "
          f"{read:.1f} ms a 1,000; by column {col_size:.1f} bytes ({col_size / size:.2f}x), "
          f"written {col_write:.1f} ms ({col_write / write:.1f}x), read {col_read:.1f} ms "
          f"({col_read / read:.1f}x)")


def by_level(bodies: list[list[bytes]], levels: list[int], rounds: int
             ) -> dict[int, tuple[float, float]]:
    """level -> (bytes a record, ms to compress a 1,000 records laid out by column)."""
    records = sum(len(lines) for lines in bodies)
    texts = [columns.encode(lines) for lines in bodies]
    out = {}
    for level in sorted({COMPACT_LEVEL, *levels}):
        compressor = zstandard.ZstdCompressor(level=level)
        size = sum(len(compressor.compress(text)) for text in texts)
        seconds = best_seconds(lambda: [compressor.compress(text) for text in texts], rounds)
        out[level] = (size / records, seconds / records * 1e6)
    return out


def report_levels(figures: dict[int, tuple[float, float]]) -> None:
    size, seconds = figures[COMPACT_LEVEL]
    for level, (level_size, level_seconds) in figures.items():
        print(f"  by column at level {level}: {level_size:.1f} bytes a record "
              f"({level_size / size:.2f}x level {COMPACT_LEVEL}'s), compressed in "
              f"{level_seconds:.1f} ms a 1,000 ({level_seconds / seconds:.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--body", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--levels", default="",
                        help="zstd levels to compare with COMPACT_LEVEL's, e.g. 9,12,14,15,16")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",") if level]
    corpus = [("events" if b'"event_type":"alert"' in line else "cfm", line)
              for line in corpus_lines()]
    for title, stream in ((f"the storage benchmark's {args.records:,} records",
                           record_stream(args.records)),
                          (f"the corpus's {len(corpus):,} records alone", corpus)):
        bodies = bodies_of(stream, args.body)
        report(f"{title} in bodies of {args.body}", measure(bodies, args.rounds))
        if levels:
            report_levels(by_level(bodies, levels, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
