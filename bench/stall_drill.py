"""Stall drill: many MACs from one address each start an upload, send a batch's worth of it
(so its transaction holds an ingestion connection) and stop sending; meanwhile an honest
router from another address uploads a small body and a large one. How long do the honest
uploads wait?

    python -m bench.stall_drill [--macs 12]

Runs twice in the same run, at default settings but for the cap under test: with
INGEST_MAX_UPLOADS_PER_ADDRESS raised out of the way (the service before the cap) and at its
default. The stalled uploads end by INGEST_BODY_IDLE_SECONDS (408) or are refused at once
(429) beyond the cap.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from bench.fleet import corpus_records
from bench.hostile import STALL_BATCH_RECORDS, stalled_upload
from server.db.location import DatabaseLocation
from testkit.database import throwaway_database
from testkit.server import ServerRunner

ATTACKER_ADDRESS = "203.0.113.99"
HONEST = {"X-ID": "02:00:00:00:5a:01", "X-Forwarded-For": "198.51.100.1",
          "Content-Type": "application/x-ndjson"}


@dataclass
class StallResult:
    stalled: Counter            # how the stalled uploads ended (status, or None)
    small_seconds: float        # the honest upload of 7 records
    large_seconds: float        # the honest upload of STALL_BATCH_RECORDS records


def records(count: int) -> bytes:
    lines = [orjson.dumps(r) for r in corpus_records()["events"]]
    return b"\n".join(lines[n % len(lines)] for n in range(count)) + b"\n"


async def timed_upload(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    started = time.perf_counter()
    async with session.post(url + "/log/events", data=io.BytesIO(body),
                            headers=HONEST) as response:
        await response.read()
        if response.status != 200:
            raise AssertionError(f"honest upload answered {response.status}")
    return time.perf_counter() - started


async def stall_round(location: DatabaseLocation, workdir: Path, macs: int,
                      **settings: str) -> StallResult:
    server = ServerRunner(location, workdir, **settings).start()
    stall_part = records(STALL_BATCH_RECORDS)
    try:
        stalls = [asyncio.create_task(stalled_upload(
            "127.0.0.1", server.port, stall_part, 60, mac=f"02:00:00:00:5b:{n:02x}",
            address=ATTACKER_ADDRESS)) for n in range(macs)]
        await asyncio.sleep(1.0)  # every stalled upload has sent its batch
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            small = await timed_upload(session, server.url, records(7))
            large = await timed_upload(session, server.url, stall_part)
        ended = Counter(await asyncio.gather(*stalls))
    finally:
        server.stop()
    return StallResult(ended, small, large)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--macs", type=int, default=12)
    args = parser.parse_args()
    with throwaway_database() as (location, workdir):
        before = asyncio.run(stall_round(location, workdir, args.macs,
                                         INGEST_MAX_UPLOADS_PER_ADDRESS="1000000"))
        after = asyncio.run(stall_round(location, workdir, args.macs))
    for label, result in (("without the per-address cap", before),
                          ("INGEST_MAX_UPLOADS_PER_ADDRESS default", after)):
        print(f"{label}: {args.macs} MACs of one address stalled "
              f"({dict(result.stalled)}); honest upload of 7 records "
              f"{result.small_seconds:.2f}s, of {STALL_BATCH_RECORDS} records "
              f"{result.large_seconds:.2f}s")
    ok = after.large_seconds < 2 and after.small_seconds < 2
    print("stall drill:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
