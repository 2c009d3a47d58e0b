"""The hunt indexer against many small uploads (issue 59): does it keep up with the agent's
cadence, and what its lanes (HUNT_INDEX_LANES) give.

    python -m bench.indexer [--routers 2000] [--uploads 20000] [--per-upload 2]
                                [--lanes 1,4] [--rounds 2]

Each run stores --uploads uploads of --per-upload records (the corpus's records, alerts as
events and the rest as CFM records, varied as bench/storage.py varies them), dealt
round --routers routers of the run's own (so every run's postings are new ones), through the
service's writer (server/telemetry/writer.py: the upload's own transaction, its pending row
included), one upload at a time on one connection: the reference, since the indexer must
keep up with what arrives. Then it times the service's indexer (server/hunt/indexer.py
index_pending) over those pending uploads with each --lanes value, the values alternating
for --rounds rounds. Prints uploads/s and records/s of both, their ratio, and the peak
resident memory of this process.

The reference agent uploads every 10 seconds: a fleet of N routers sends about N/10 uploads
a second (two when it has both alerts and other records), which the indexer's uploads/s
here must exceed.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time
from datetime import datetime, timezone

from bench.storage import record_stream
from server.db.pool import Database
from server.hunt.budget import HuntBudget
from server.hunt.indexer import index_pending
from server.hunt.postings import POSTINGS_PER_ROUTER_DAY, PendingUpload
from server.telemetry.writer import TelemetryWriter
from testkit.database import Sql, throwaway_database


def uploads_for(run: int, routers: int, uploads: int, per_upload: int,
                stream: list[tuple[str, bytes]]) -> list[tuple[str, str, list[bytes]]]:
    """(mac, kind, lines) for the run's uploads: its own routers, each upload one kind."""
    out = []
    for n in range(uploads):
        start = n * per_upload % (len(stream) - per_upload)
        piece = stream[start:start + per_upload]
        kind = piece[0][0]
        router = n % routers
        mac = f"02:59:{run:02x}:00:{router >> 8 & 255:02x}:{router & 255:02x}"
        out.append((mac, kind, [line for _, line in piece]))
    return out


async def store(db: Database, uploads: list[tuple[str, str, list[bytes]]]) -> float:
    """Seconds to store the uploads through the service's writer, one at a time."""
    started = time.perf_counter()
    for mac, kind, lines in uploads:
        async with TelemetryWriter(db, mac, kind, datetime.now(timezone.utc), 2_000,
                                   announce=PendingUpload()) as writer:
            for line in lines:
                if writer.add(line):
                    await writer.flush()
            await writer.commit()
    return time.perf_counter() - started


async def run(location, args) -> dict[int, list[tuple[float, float]]]:
    stream = record_stream(max(20_000, args.per_upload * 10))
    lanes_asked = [int(value) for value in args.lanes.split(",")]
    db = await Database.open(location, 1, 4 + max(lanes_asked), 60)
    results: dict[int, list[tuple[float, float]]] = {lanes: [] for lanes in lanes_asked}
    try:
        run_number = 0
        for round_number in range(args.rounds):
            order = lanes_asked if round_number % 2 == 0 else lanes_asked[::-1]
            for lanes in order:
                run_number += 1
                uploads = uploads_for(run_number, args.routers, args.uploads,
                                      args.per_upload, stream)
                stored = await store(db, uploads)
                started = time.perf_counter()
                done = await index_pending(db, HuntBudget(POSTINGS_PER_ROUTER_DAY), lanes=lanes)
                indexed = time.perf_counter() - started
                pending = Sql(location).value("SELECT count(*) FROM hunt_pending")
                if done.uploads != len(uploads) or pending:
                    raise SystemExit(f"indexed {done.uploads} of {len(uploads)} uploads, "
                                     f"{pending} pending, {done.set_aside} set aside")
                results[lanes].append((stored, indexed))
                print(f"lanes {lanes}: stored {len(uploads) / stored:,.0f} uploads/s, indexed "
                      f"{len(uploads) / indexed:,.0f} uploads/s ({done.records / indexed:,.0f} "
                      f"records/s, {done.postings:,} values): {stored / indexed:.2f}x",
                      flush=True)
    finally:
        await db.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routers", type=int, default=2_000)
    parser.add_argument("--uploads", type=int, default=20_000)
    parser.add_argument("--per-upload", type=int, default=2)
    parser.add_argument("--lanes", default="1,4")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with throwaway_database() as (location, _):
        results = asyncio.run(run(location, args))
    print(f"\n{args.uploads:,} uploads of {args.per_upload} records, {args.routers:,} routers:")
    for lanes, runs in results.items():
        rates = [args.uploads / indexed for _, indexed in runs]
        ratios = [stored / indexed for stored, indexed in runs]
        print(f"  lanes {lanes}: indexed {statistics.median(rates):,.0f} uploads/s (median of "
              f"{len(runs)}), {statistics.median(ratios):.2f}x the writer's rate, same run")
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
