"""Polling benchmark: GET /rules/ids answered 304 (the router has the current ETag) and 200
(gzip payload), against a minimal aiohttp handler returning a constant, in the same run.

    python -m ops.bench.polling [--routers 200] [--requests 20000] [--concurrency 32]

Publishes the corpus ruleset, registers the routers and lets the real server generate their
payloads, then measures requests/s and p99 latency of each path with the same client. The
reference is the framework's own ceiling: an aiohttp app with one handler returning a
constant, run as its own process like the server. It also reads PostgreSQL's row-write
counters of the service's tables around the 304 run: the 304 path must write nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import sys
import time
from dataclasses import dataclass

import aiohttp

from server.db.location import DatabaseLocation
from testkit.corpus import publish_corpus_ruleset
from testkit.database import Sql, throwaway_database
from testkit.server import ServerRunner, free_port, wait_listening

FIRST_MAC = 0x0200_0000_5000
# An idle backend reports its row counts to pg_stat_* within 10 s (PGSTAT_IDLE_INTERVAL).
STATS_SETTLE_SECONDS = 11


@dataclass
class Run:
    requests: int
    seconds: float
    latencies: list[float]
    statuses: dict[int, int]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def p99_ms(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[int(len(ordered) * 0.99) - 1] * 1000


async def load(url: str, calls: list[dict], concurrency: int) -> Run:
    """Send every call (headers of one GET) over `concurrency` keep-alive connections."""
    queue = list(reversed(calls))
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            headers = queue.pop()
            started = time.perf_counter()
            async with session.get(url, headers=headers) as response:
                await response.read()
            latencies.append(time.perf_counter() - started)
            statuses[response.status] = statuses.get(response.status, 0) + 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return Run(len(calls), seconds, latencies, statuses)


def mac(number: int) -> str:
    digits = f"{FIRST_MAC + number:012x}"
    return ":".join(digits[i:i + 2] for i in range(0, 12, 2))


async def register_and_wait(url: str, macs: list[str], timeout: float = 300) -> dict[str, str]:
    """Register each router (first call) and wait until its IDS payload exists; return ETags."""
    etags: dict[str, str] = {}
    async with aiohttp.ClientSession() as session:
        for address in macs:
            async with session.get(f"{url}/rules/last_updated", headers={"X-ID": address}):
                pass
        deadline = time.monotonic() + timeout
        while len(etags) < len(macs) and time.monotonic() < deadline:
            for address in macs:
                if address not in etags:
                    async with session.get(f"{url}/rules/ids",
                                           headers={"X-ID": address}) as response:
                        await response.read()
                        if response.status == 200:
                            etags[address] = response.headers["ETag"]
            await asyncio.sleep(0.5)
    if len(etags) < len(macs):
        raise RuntimeError(f"only {len(etags)} of {len(macs)} routers generated in {timeout}s")
    return etags


def row_writes(location: DatabaseLocation) -> int:
    return int(Sql(location).value("SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), "
                                     "0) FROM pg_stat_user_tables"))


def serve_constant(port: int) -> None:
    from aiohttp import web

    body = b'{"version": "constant"}'

    async def constant(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/rules/ids", constant)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=200)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--serve-constant", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_constant:
        serve_constant(args.serve_constant)
        return 0

    rng = random.Random(1)
    macs = [mac(n) for n in range(args.routers)]
    with throwaway_database() as (location, workdir):
        server = ServerRunner(location, workdir, RULE_GENERATION_MAX_CONCURRENT="2",
                              **publish_corpus_ruleset(location, workdir)).start()
        port = free_port()
        constant = subprocess.Popen([sys.executable, "-m", "ops.bench.polling",
                                     "--serve-constant", str(port)])
        try:
            if not wait_listening(constant, port):
                raise RuntimeError("the constant server did not start")
            etags = asyncio.run(register_and_wait(server.url, macs))
            picks = [rng.choice(macs) for _ in range(args.requests)]
            calls_304 = [{"X-ID": m, "If-None-Match": etags[m], "Accept-Encoding": "gzip"}
                         for m in picks]
            calls_200 = [{"X-ID": m, "Accept-Encoding": "gzip"} for m in picks]
            url = f"{server.url}/rules/ids"
            asyncio.run(load(url, calls_304[:2000], args.concurrency))  # warm-up
            reference = asyncio.run(load(f"http://127.0.0.1:{port}/rules/ids",
                                         [{} for _ in picks], args.concurrency))
            time.sleep(STATS_SETTLE_SECONDS)  # earlier writes (generation) reach the counters
            writes_before = row_writes(location)
            not_modified = asyncio.run(load(url, calls_304, args.concurrency))
            time.sleep(STATS_SETTLE_SECONDS)
            writes_during_304 = row_writes(location) - writes_before
            full = asyncio.run(load(url, calls_200, args.concurrency))
        finally:
            constant.terminate()
            constant.wait(10)
            server.stop()
    if not_modified.statuses != {304: args.requests} or full.statuses != {200: args.requests}:
        raise RuntimeError(f"unexpected answers: {not_modified.statuses} {full.statuses}")
    print(f"{args.routers} routers with generated payloads, {args.requests} requests per run, "
          f"concurrency {args.concurrency}")
    for name, run in (("constant aiohttp handler", reference), ("GET /rules/ids 304", not_modified),
                      ("GET /rules/ids 200 gzip", full)):
        print(f"{name:26} {run.rate:>8,.0f} req/s  p99 {run.p99_ms:6.1f} ms  "
              f"ratio to constant {run.rate / reference.rate:.2f}")
    print(f"rows written to the service's tables during the 304 run: {writes_during_304}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
