"""Polling benchmark: GET /rules/ids answered 304 (the router has the current ETag) and 200
(gzip payload), against a minimal aiohttp handler returning a constant, and the 304 path with
2 HTTP workers (HTTP_WORKERS=2, under the supervisor) against 1, in the same run, beside the
constant handler's own 2 processes against 1.

    python -m bench.polling [--routers 300] [--seconds 10] [--rounds 2]

Publishes the corpus ruleset, registers the routers and lets the real server generate their
payloads, then loads each path with wrk (1 thread, 32 connections; a Lua script cycles
through the routers with X-ID and If-None-Match), rounds alternating, best of each. The
reference is the framework's own ceiling: an aiohttp app with one handler returning a
constant, run as its own process like the server; for 2 processes against 1, the same
handler in 2 processes sharing its port with SO_REUSEPORT, as the workers do. On a machine
whose cores wrk shares, that pair tells how far 2 processes of any aiohttp server can go
there. It also reads PostgreSQL's row-write counters of the service's tables around the 304
runs: the 304 path must write nothing. Each run also reports the cores wrk and the serving
processes kept busy, to tell which saturated.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections import Counter

import aiohttp

from bench.wrk import POLL_SCRIPT, available, router_file, run_wrk
from server.db.location import DatabaseLocation
from server.ingest.tally import FLUSH_SECONDS
from testkit.corpus import publish_corpus_ruleset
from testkit.database import Sql, throwaway_database
from testkit.server import ServerRunner, free_port

FIRST_MAC = 0x0200_0000_5000
# An idle backend reports its row counts to pg_stat_* within 10 s (PGSTAT_IDLE_INTERVAL).
STATS_SETTLE_SECONDS = 11


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


def row_writes(location: DatabaseLocation) -> Counter:
    """Rows inserted, updated or deleted so far, by table."""
    return Counter(dict(Sql(location).rows(
        "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables")))


def start_constant(port: int, processes: int) -> list[subprocess.Popen]:
    """The constant handler in `processes` processes listening on `port` (SO_REUSEPORT), once
    each of them says it listens (a process that came late would get no connection)."""
    started = [subprocess.Popen([sys.executable, "-m", "bench.polling", "--serve-constant",
                                 str(port)], stdout=subprocess.PIPE, text=True)
               for _ in range(processes)]
    for process in started:
        if process.stdout.readline().strip() != "listening":
            raise RuntimeError("the constant server did not start")
    return started


def serve_constant(port: int) -> None:
    from aiohttp import web

    body = b'{"version": "constant"}'

    async def constant(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/rules/ids", constant)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, reuse_port=True,
                print=lambda _: print("listening", flush=True))


def per_core(run: dict) -> float:
    """Requests answered per core the serving processes kept busy."""
    return run["rate"] / run["server_cores"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=300)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve-constant", type=int, metavar="PORT",
                        help="serve only the reference (a constant aiohttp handler) on PORT; "
                             "the benchmark starts it so")
    args = parser.parse_args()
    if args.serve_constant:
        serve_constant(args.serve_constant)
        return 0
    if not available():
        print("wrk is not installed (Debian package wrk)", file=sys.stderr)
        return 1
    macs = [mac(n) for n in range(args.routers)]
    runs: dict[str, list[dict]] = {"constant": [], "constant x2": [], "304": [], "304 x2": [],
                                   "200": [], "last_updated": []}
    with throwaway_database() as (location, workdir):
        ruleset = publish_corpus_ruleset(location, workdir)
        # No scheduled job in the runs (compaction's default is every 10 minutes): the rows
        # counted during the 304 runs are the 304 path's.
        quiet = {"TELEMETRY_COMPACT_CRON_SCHEDULE": "0 0 1 1 *", **ruleset}
        server = ServerRunner(location, workdir, RULE_GENERATION_MAX_CONCURRENT="2",
                              **quiet).start()
        workers = ServerRunner(location, workdir / "workers", HTTP_WORKERS="2",
                               RULE_GENERATION_ENABLED="false", **quiet).start()
        port, port_x2 = free_port(), free_port()
        constants: list[subprocess.Popen] = []
        try:
            constants += start_constant(port, 1)
            constants += start_constant(port_x2, 2)
            etags = asyncio.run(register_and_wait(server.url, macs))
            script = workdir / "poll.lua"
            script.write_text(POLL_SCRIPT)
            with_etags = str(router_file(workdir / "etags.tsv", etags))
            without = str(router_file(workdir / "plain.tsv", etags, with_etags=False))
            for url in (server.url, workers.url):  # warm-up: the ETag caches
                run_wrk(url, script, 2, 32, with_etags)
            # Earlier writes reach the counters: generation's, and the traffic tally's count of
            # the registration polls, flushed every FLUSH_SECONDS.
            time.sleep(STATS_SETTLE_SECONDS + FLUSH_SECONDS)
            writes_before = row_writes(location)
            single, pair = [server.process.pid], workers.children("serving")
            for _ in range(args.rounds):
                runs["constant"].append(run_wrk(
                    f"http://127.0.0.1:{port}/rules/ids", None, args.seconds, 32,
                    server_pids=[constants[0].pid]))
                runs["constant x2"].append(run_wrk(
                    f"http://127.0.0.1:{port_x2}/rules/ids", None, args.seconds, 32,
                    server_pids=[process.pid for process in constants[1:]]))
                runs["304"].append(run_wrk(server.url, script, args.seconds, 32, with_etags,
                                           server_pids=single))
                runs["304 x2"].append(run_wrk(workers.url, script, args.seconds, 32,
                                              with_etags, server_pids=pair))
            time.sleep(STATS_SETTLE_SECONDS)
            writes_during_304 = row_writes(location) - writes_before
            runs["200"].append(run_wrk(server.url, script, args.seconds, 32, without,
                                       server_pids=single))
            # GET /rules/last_updated: what every poll starts with (an activation written).
            activation_script = workdir / "last_updated.lua"
            activation_script.write_text(POLL_SCRIPT.replace("/rules/ids", "/rules/last_updated"))
            runs["last_updated"].append(run_wrk(server.url, activation_script, args.seconds, 32,
                                                without, server_pids=single))
        finally:
            for process in constants:
                process.terminate()
                process.wait(10)
            workers.stop()
            server.stop()
    if any(run["non_2xx_3xx"] for kind in runs.values() for run in kind):
        raise RuntimeError(f"answers other than 2xx/3xx: {runs}")
    best = {name: max(kind, key=lambda run: run["rate"]) for name, kind in runs.items()}
    print(f"{args.routers} routers with generated payloads; wrk 1 thread, 32 connections, "
          f"{args.rounds} x {args.seconds} s alternating (best)")
    for name, label in (("constant", "constant aiohttp handler"),
                        ("constant x2", "constant, 2 processes"),
                        ("304", "GET /rules/ids 304"), ("304 x2", "304, 2 HTTP workers"),
                        ("200", "GET /rules/ids 200 gzip"),
                        ("last_updated", "GET /rules/last_updated")):
        run = best[name]
        print(f"{label:26} {run['rate']:>8,.0f} req/s  p99 {run['p99_ms']:6.1f} ms  "
              f"ratio to constant {run['rate'] / best['constant']['rate']:.2f}  "
              f"(cores busy: wrk {run['wrk_cores']:.2f}, server {run['server_cores']:.2f})")
    for pair, single, label in (("304 x2", "304", "2 HTTP workers vs 1 on the 304 path"),
                                ("constant x2", "constant",
                                 "2 constant-handler processes vs 1 (this machine's reference)")):
        print(f"{label}: {best[pair]['rate'] / best[single]['rate']:.2f}x; per busy core "
              f"{per_core(best[pair]) / per_core(best[single]):.2f}x")
    tables = ", ".join(f"{table} {count}" for table, count in writes_during_304.items())
    print(f"rows written to the service's tables during the 304 runs: "
          f"{writes_during_304.total()}{f' ({tables})' if tables else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
