"""Separators benchmark: the CPU a gzip body of nothing but separators costs the NDJSON
splitter, newlines against spaces (the reference, in the same run); then what eight such
uploads at once do to another client's `/health` on the real server.

    python -m bench.separators [--kib 300]

Each body is about `--kib` KiB of gzip (what one upload may send), decoded as the service
decodes it (zlib, in pieces, stopping at INGEST_MAX_GZIP_RATIO times the received size) and
fed to the splitter; the first figure is the CPU seconds of newlines over spaces. Before
issue 44 the splitter went line by line: 3.4 s for newlines against 0.28 s for spaces. The
second: the server (one process, default ingestion limits) gets 8 uploads of each body at
once from one address while a watcher polls `/health` every 20 ms; the watcher's median and
worst answer times, newlines against spaces.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

import aiohttp

from server.ingest.records import NdjsonSplitter
from server.settings import load_settings
from testkit.database import database_server, migrated_database
from testkit.server import ServerRunner

PIECE = 65536
WATCHER = "02:00:00:00:44:02"


def gzip_of(byte: bytes, kib: int) -> bytes:
    """A gzip body of about `kib` KiB holding nothing but `byte`."""
    body, size = b"", 1 << 20
    while len(body) < kib * 1024:
        size *= 2
        body = gzip.compress(byte * size, 9)
    return body


def cpu_seconds(body: bytes, max_ratio: int, max_record: int) -> tuple[float, int]:
    """CPU to decode `body` up to the ratio limit and split it; the bytes decoded."""
    began = time.process_time()
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    splitter = NdjsonSplitter(max_record)
    decoded, budget = 0, max_ratio * len(body)
    data = body
    while data and decoded < budget:
        piece = decoder.decompress(data, PIECE)
        data = decoder.unconsumed_tail
        decoded += len(piece)
        splitter.feed(piece)
    splitter.close()
    return time.process_time() - began, decoded


async def health_while_uploading(url: str, body: bytes) -> list[float]:
    """The watcher's /health answer times while 8 uploads of `body` run at once."""
    times: list[float] = []
    statuses: list[int] = []
    done = asyncio.Event()
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/x-ndjson"}
    async with aiohttp.ClientSession() as session:
        async def upload(n: int) -> None:  # 8 routers: one router may upload 2 at once
            async with session.post(url + "/log/events", data=body, headers={
                    **headers, "X-ID": f"02:00:00:00:44:{16 + n:02x}"}) as answer:
                statuses.append(answer.status)
                await answer.read()

        async def watch() -> None:
            while not done.is_set():
                began = time.perf_counter()
                async with session.get(url + "/health", headers={"X-ID": WATCHER}) as answer:
                    await answer.read()
                times.append(time.perf_counter() - began)
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        await asyncio.gather(*(upload(n) for n in range(8)))
        done.set()
        await watcher
    assert statuses == [413] * 8, statuses  # each refused once it decodes past the ratio
    return times


def health_figures(bodies: dict[str, bytes]) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="separators-") as workdir, \
            database_server("DB_") as server, migrated_database(server, "bench") as location:
        runner = ServerRunner(location, Path(workdir), flood_limits=True,
                              RULE_GENERATION_ENABLED="false").start()
        try:
            return {name: asyncio.run(health_while_uploading(runner.url, body))
                    for name, body in bodies.items()}
        finally:
            runner.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kib", type=int, default=300)
    args = parser.parse_args()
    settings = load_settings({}, env_file=None)
    results = {}
    for name, byte in (("spaces", b" "), ("newlines", b"\n")):
        body = gzip_of(byte, args.kib)
        results[name] = cpu_seconds(body, settings.ingest_max_gzip_ratio,
                                    settings.ingest_max_record_bytes)
        print(f"{name}: {len(body) / 1024:.0f} KiB of gzip, {results[name][1] / 1e6:.0f} MB "
              f"decoded, {results[name][0]:.2f} s of CPU")
    print(f"newlines / spaces: {results['newlines'][0] / results['spaces'][0]:.2f}x")
    bodies = {name: gzip_of(byte, args.kib) for name, byte in (("spaces", b" "),
                                                               ("newlines", b"\n"))}
    for name, times in health_figures(bodies).items():
        print(f"/health during 8 uploads of {name} at once: median "
              f"{statistics.median(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms "
              f"({len(times)} polls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
