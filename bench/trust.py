"""Router trust benchmark (issue 12): what ROUTER_AUTH=key costs, and one router's flood.

    python -m bench.trust [--routers 300] [--seconds 10] [--rounds 2]

1. 304 polling: `wrk` (1 thread, 32 connections) sends GET /rules/ids with `X-ID` and
   `If-None-Match` for every router in turn, and in key mode its `Authorization`, to two
   server processes on one database, one in mac mode and one in key mode, rounds
   alternating; prints the best req/s of each and the ratio key/mac.
2. Ingestion: two clients, each a router of its own, stream 5,000-record NDJSON bodies of
   corpus alerts to the same two servers, rounds alternating; ratio key/mac.
3. Flood: a third server with the default flood limits; `wrk` posts as one router from 4
   connections for 20 s while other routers poll /rules/last_updated every 20 ms (each under
   its limit); prints the flood's answers and the pollers' p99 against a quiet run of the
   same length just before.

wrk is the load generator for 1 and 3 (Debian package `wrk`): a Python client saturates
before the server does.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from bench.ingest import make_lines, ndjson_bodies, run_http, truncate
from bench.polling import mac, register_and_wait
from bench.wrk import POLL_SCRIPT, available, router_file, run_wrk
from server.db.connect import connect
from server.db.location import DatabaseLocation
from server.routers.keys import key_hash
from testkit.corpus import publish_corpus_ruleset
from testkit.database import throwaway_database
from testkit.server import ServerRunner

FLOOD_SCRIPT = """
wrk.method = "POST"
wrk.body = '{"event_type": "alert", "alert": {"signature_id": 1, "severity": 3}}\\n'
wrk.headers["X-ID"] = "02:00:00:00:f1:00"
wrk.headers["Content-Type"] = "application/x-ndjson"
"""
POLLERS = [f"02:00:00:00:f2:{n:02x}" for n in range(32)]  # 50 polls/s: ~94 a minute each


def issue_keys(location: DatabaseLocation, macs: list[str]) -> dict[str, str]:
    """A key per router, stored as the service stores them (only the hash)."""
    keys = {address: secrets.token_urlsafe(32) for address in macs}
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            for address, key in keys.items():
                cur.execute("INSERT INTO routers (mac) VALUES (%s) ON CONFLICT DO NOTHING",
                            (address,))
                cur.execute("INSERT INTO router_keys (mac, key_hash, issued_by) "
                            "VALUES (%s, %s, 'operator') ON CONFLICT (mac) DO UPDATE SET "
                            "key_hash = EXCLUDED.key_hash", (address, key_hash(key)))
    finally:
        conn.close()
    return keys


def polling(servers: dict[str, ServerRunner], etags: dict[str, str], keys: dict[str, str],
            workdir: Path, seconds: int, rounds: int) -> dict[str, list[dict]]:
    script = workdir / "poll.lua"
    script.write_text(POLL_SCRIPT)
    files = {mode: str(router_file(workdir / f"routers-{mode}.tsv", etags,
                                   keys if mode == "key" else None))
             for mode in ("mac", "key")}
    runs: dict[str, list[dict]] = {"mac": [], "key": []}
    for mode in ("mac", "key"):  # warm-up: every router's ETag into each server's cache
        run_wrk(servers[mode].url, script, 2, 32, files[mode])
    for _ in range(rounds):
        for mode in ("mac", "key"):
            runs[mode].append(run_wrk(servers[mode].url, script, seconds, 32, files[mode]))
    return runs


def ingestion(servers: dict[str, ServerRunner], location: DatabaseLocation,
              rounds: int) -> dict[str, list[float]]:
    bodies = ndjson_bodies(make_lines(100_000), 5_000)
    writers = [f"02:00:00:00:be:{n + 1:02x}" for n in range(2)]  # run_http's routers
    keys = issue_keys(location, writers)
    times: dict[str, list[float]] = {"mac": [], "key": []}
    for _ in range(rounds):
        for mode in ("mac", "key"):
            truncate(location)
            times[mode].append(asyncio.run(run_http(servers[mode].port, bodies, 2,
                                                    keys if mode == "key" else None)))
    return times


async def poll_latencies(url: str, seconds: float) -> tuple[list[float], dict[int, int]]:
    latencies, statuses = [], {}
    async with aiohttp.ClientSession() as session:
        deadline, turn = time.monotonic() + seconds, 0
        while time.monotonic() < deadline:
            started = time.perf_counter()
            async with session.get(f"{url}/rules/last_updated",
                                   headers={"X-ID": POLLERS[turn % len(POLLERS)]}) as answer:
                await answer.read()
            latencies.append(time.perf_counter() - started)
            statuses[answer.status] = statuses.get(answer.status, 0) + 1
            turn += 1
            await asyncio.sleep(0.02)
    return latencies, statuses


def flood(location: DatabaseLocation, workdir: Path, seconds: int) -> dict:
    issue_keys(location, POLLERS)  # registered before: the registration limit stays out of it
    server = ServerRunner(location, workdir, flood_limits=True,
                          RULE_GENERATION_ENABLED="false").start()
    script = workdir / "flood.lua"
    script.write_text(FLOOD_SCRIPT)
    try:
        quiet, quiet_statuses = asyncio.run(poll_latencies(server.url, seconds))
        flooding = subprocess.Popen(["wrk", "-t1", "-c4", f"-d{seconds}s", "-s", str(script),
                                     f"{server.url}/log/events"],
                                    stdout=subprocess.PIPE, text=True)
        during, during_statuses = asyncio.run(poll_latencies(server.url, seconds))
        output = flooding.communicate()[0]
    finally:
        server.stop()
    total = int(re.search(r"(\d+) requests in", output).group(1))
    refused = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return {"quiet_p99": _p99(quiet), "flood_p99": _p99(during), "flood_requests": total,
            "flood_refused": int(refused.group(1)) if refused else 0,
            "pollers": {**quiet_statuses, **{f"during {k}": v
                                             for k, v in during_statuses.items()}}}


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=300)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--flood-seconds", type=int, default=20)
    args = parser.parse_args()
    if not available():
        print("wrk is not installed (Debian package wrk)", file=sys.stderr)
        return 1
    macs = [mac(n) for n in range(args.routers)]
    with throwaway_database() as (location, workdir):
        ruleset = publish_corpus_ruleset(location, workdir)
        generator = ServerRunner(location, workdir, RULE_GENERATION_MAX_CONCURRENT="2",
                                 **ruleset).start()
        try:
            etags = asyncio.run(register_and_wait(generator.url, macs))
        finally:
            generator.stop()
        keys = issue_keys(location, macs)
        servers = {mode: ServerRunner(location, workdir / mode, ROUTER_AUTH=mode,
                                      RULE_GENERATION_ENABLED="false", **ruleset).start()
                   for mode in ("mac", "key")}
        try:
            polls = polling(servers, etags, keys, workdir, args.seconds, args.rounds)
            ingest = ingestion(servers, location, args.rounds)
        finally:
            for server in servers.values():
                server.stop()
        flooded = flood(location, workdir, args.flood_seconds)
    best = {mode: max(run["rate"] for run in runs) for mode, runs in polls.items()}
    errors = {mode: sum(run["non_2xx_3xx"] for run in runs) for mode, runs in polls.items()}
    print(f"304 polling, {args.routers} routers, wrk 1 thread 32 connections, "
          f"{args.rounds} x {args.seconds} s each (best): mac {best['mac']:,.0f} req/s, "
          f"key {best['key']:,.0f} req/s: ratio {best['key'] / best['mac']:.2f} "
          f"(answers other than 304: {errors})")
    fastest = {mode: min(times) for mode, times in ingest.items()}
    print(f"ingestion, 100,000 records in 5,000-record bodies, 2 routers (best of "
          f"{args.rounds}): mac {100_000 / fastest['mac']:,.0f} records/s, key "
          f"{100_000 / fastest['key']:,.0f} records/s: ratio "
          f"{fastest['mac'] / fastest['key']:.2f}")
    print(f"flood: one router posting from 4 connections for {args.flood_seconds} s: "
          f"{flooded['flood_requests']} requests, {flooded['flood_refused']} refused (429); "
          f"other routers' /rules/last_updated p99 {flooded['flood_p99']:.1f} ms vs "
          f"{flooded['quiet_p99']:.1f} ms quiet: ratio "
          f"{flooded['flood_p99'] / flooded['quiet_p99']:.2f}; their answers "
          f"{flooded['pollers']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
