"""Routers flooding the hunt index (issue 59): each sends DNS records of random names at full
speed while an honest router uploads as the agent does. The index grows by at most each
flooder's daily budget (HUNT_POSTINGS_PER_ROUTER_DAY), counted across its uploads, and the
honest router's upload time is compared with the same uploads on a quiet server, in the
same run.

    python -m ops.bench.hunt_flood [--flooders 1,100] [--seconds 30] [--budget 2000]

The real server (`python -m ops.cli serve`, one process) on an embedded PostgreSQL, its
per-address limits raised (every client here is 127.0.0.1; a real flood comes from many
addresses); every client is an aiohttp session of this process: the flooders' uploads
(200 records of random names each) and the honest router's (its corpus day's alerts, 44
records, one every 0.2 s).
What saturates is printed: the flooders' uploads a second against the server's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import string
import sys
import time

import aiohttp
import orjson

from ops.bench.fleet import corpus_records
from ops.bench.crash_drill import INDEX_TIMEOUT, await_indexed
from testkit.database import Sql, throwaway_database
from testkit.server import running_server

HONEST = "02:59:00:00:00:01"
RECORDS_A_FLOOD = 200
HONEST_PAUSE = 0.2


def _flood_body(rng: random.Random) -> bytes:
    return b"\n".join(orjson.dumps({
        "event_type": "dns", "src_ip": "192.168.1.20", "dest_ip": "192.0.2.53",
        "dns": {"type": "query", "rrtype": "A", "rrname": "".join(
            rng.choices(string.ascii_lowercase, k=12)) + ".flood.example"}})
        for _ in range(RECORDS_A_FLOOD))


async def _post(session: aiohttp.ClientSession, port: int, mac: str, body: bytes) -> bool:
    """One flood upload; False when the server said 429 (its limits: try again later)."""
    async with session.post(f"http://127.0.0.1:{port}/log/cfm", data=body, headers={
            "X-ID": mac, "Content-Type": "application/x-ndjson"}) as response:
        await response.read()
        if response.status == 429:
            return False
        if response.status != 200:
            raise RuntimeError(f"{mac}: {response.status}")
    return True


async def honest_uploads(port: int, seconds: float, stop: asyncio.Event) -> list[float]:
    alerts = [r for r in corpus_records()["events"]][:44]
    body = b"\n".join(orjson.dumps(r) for r in alerts)
    times: list[float] = []
    async with aiohttp.ClientSession() as session:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            async with session.post(f"http://127.0.0.1:{port}/log/events", data=body,
                                    headers={"X-ID": HONEST,
                                             "Content-Type": "application/x-ndjson"}) as answer:
                await answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"the honest router's upload: {answer.status}")
            times.append(time.perf_counter() - started)
            await asyncio.sleep(HONEST_PAUSE)
    stop.set()
    return times


async def flood(port: int, flooders: int, stop: asyncio.Event) -> int:
    sent = 0

    async def one(number: int) -> None:
        nonlocal sent
        rng = random.Random(number)
        mac = f"02:5a:00:00:{number >> 8:02x}:{number & 255:02x}"
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                if await _post(session, port, mac, _flood_body(rng)):
                    sent += 1
                else:
                    await asyncio.sleep(0.1)

    await asyncio.gather(*(one(n) for n in range(flooders)))
    return sent


async def under_flood(port: int, flooders: int, seconds: float) -> tuple[list[float], int]:
    stop = asyncio.Event()
    honest, sent = await asyncio.gather(honest_uploads(port, seconds, stop),
                                        flood(port, flooders, stop))
    return honest, sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flooders", default="1,100")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--budget", type=int, default=2000)
    args = parser.parse_args()
    with throwaway_database() as (location, workdir), \
            running_server(location, workdir, HUNT_POSTINGS_PER_ROUTER_DAY=str(args.budget),
                           TELEMETRY_COMPACT_CRON_SCHEDULE="0 0 1 1 *",
                           # every client is 127.0.0.1 here; a real fleet's are many
                           REGISTRATIONS_PER_MINUTE_PER_ADDRESS="100000",
                           INGEST_MAX_UPLOADS_PER_ADDRESS="1000") as server:
        sql = Sql(location)
        quiet = asyncio.run(honest_uploads(server.port, args.seconds, asyncio.Event()))
        print(f"quiet: the honest router's upload p50 {statistics.median(quiet) * 1000:.1f} ms "
              f"({len(quiet)} uploads)")
        for flooders in (int(n) for n in args.flooders.split(",")):
            sql.rows("TRUNCATE hunt_budgets")
            before = sql.value("SELECT count(*) FROM hunt_postings WHERE mac <> %s", (HONEST,))
            honest, sent = asyncio.run(under_flood(server.port, flooders, args.seconds))
            behind = asyncio.run(await_indexed(location, INDEX_TIMEOUT))
            print(f"the server's hunt indexer read every upload {behind:.1f} s after the "
                  "flood ended")
            added = sql.value("SELECT count(*) FROM hunt_postings WHERE mac <> %s",
                              (HONEST,)) - before
            most = sql.value("SELECT max(postings) FROM hunt_budgets WHERE mac <> %s",
                             (HONEST,))
            unindexed = sql.value("SELECT sum(unindexed) FROM hunt_budgets")
            ratio = statistics.median(honest) / statistics.median(quiet)
            print(f"{flooders} flooder(s), {args.seconds:.0f} s: {sent} uploads of "
                  f"{RECORDS_A_FLOOD} random names ({sent / args.seconds:.0f} a second); "
                  f"index grew by {added} postings (at most {flooders} × the budget "
                  f"{args.budget} + one upload's allowance each: "
                  f"{flooders * (args.budget + 2_000 + 4 * RECORDS_A_FLOOD * 3)}), the most "
                  f"one flooder posted {most}, {unindexed} values not indexed; the honest "
                  f"router's upload p50 {statistics.median(honest) * 1000:.1f} ms, "
                  f"{ratio:.2f}x the quiet one (the server's one process and this client "
                  f"share the 2 cores: the flood's uploads a second are what saturates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
