"""Routers flooding the hunt index (issue 59): each sends DNS records of random names at full
speed while an honest router uploads as the agent does. The index grows by at most each
flooder's daily budget (HUNT_POSTINGS_PER_ROUTER_DAY), counted across its uploads, and the
honest router's upload time is compared with the same uploads on a quiet server, in the
same run.

    python -m bench.hunt_flood [--flooders 1,100] [--seconds 30] [--after 2] [--budget 2000]
                                   [--router-limits default|off] [--cycles 1]
                                   [--set NAME=VALUE]

The real server (`python -m ops.cli serve`, one process) on an embedded PostgreSQL (or the
server named by DB_HOST...), its per-address limits raised (every client here is 127.0.0.1; a
real flood comes from many addresses). Its per-router limits (ROUTER_REQUESTS_PER_MINUTE,
ROUTER_RECORDS_PER_MINUTE) are the defaults, as a real flooder meets them, unless
--router-limits off raises them too (each flooder then sends as fast as the server answers).
The flood is driven by wrk (one connection a flooder, each request 200 records of random
names, from 256 bodies its Lua script makes at the start, the flooders' MACs in turn), since
a Python client saturates before the server does; the honest router is a process of its own
(`--honest-only PORT`: its corpus day's alerts, 44 records, an upload every 0.2 s, or every
0.6 s within the default per-router limit of 2 requests a second), so that its times are the
server's, not a busy client's. What saturates is printed: the cores wrk and the server kept
busy. --set: a setting of the server's (repeatable), e.g. HUNT_INDEX_SECONDS=3600 to flood
with the hunt indexer idle (the index then does not grow, and is not waited for), or
HTTP_WORKERS=2 for the supervisor and its processes (the layout of `auto` on two cores; the
cores printed are all of theirs).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import orjson

from bench.fleet import corpus_records
from bench.crash_drill import INDEX_TIMEOUT, await_indexed
from bench.ingest import add_settings_option
from bench.wrk import available, run_wrk
from testkit.database import Sql, throwaway_database
from testkit.server import running_server

HONEST = "02:59:00:00:00:01"
RECORDS_A_FLOOD = 200
BODIES = 256  # the flood's bodies, made at wrk's start (FLOOD_SCRIPT)
HONEST_PAUSE = {"off": 0.2, "default": 0.6}  # by --router-limits: 2 requests/s at most
# Raised whatever --router-limits says: every client of this benchmark is 127.0.0.1.
PER_ADDRESS = {"REGISTRATIONS_PER_MINUTE_PER_ADDRESS": "100000",
               "FAILED_CREDENTIALS_PER_MINUTE_PER_ADDRESS": "100000",
               "INGEST_MAX_UPLOADS_PER_ADDRESS": "1000"}


# Each request: the next flooder's MAC (numbered from the 4th argument) and the next of
# BODIES bodies of RECORDS_A_FLOOD DNS records of random 12-letter names, made once at the
# start: generating 200 names a request kept half a core of wrk busy, taken from the two
# cores the server shares with it (a real flood's client does not run on the server). A
# flooder cycles through 64 of them (gcd(100, 256) = 4): 12,800 names, far past its budget.
FLOOD_SCRIPT = """
local flooders, i = 1, 0
local letters = "abcdefghijklmnopqrstuvwxyz"
local first = 0
local bodies = {}
local function name()
  local t = {}
  for k = 1, 12 do local n = math.random(1, 26); t[k] = letters:sub(n, n) end
  return table.concat(t)
end
init = function(args)
  flooders = tonumber(args[1])
  local records = tonumber(args[2])
  math.randomseed(tonumber(args[3]))
  first = tonumber(args[4])
  for b = 1, tonumber(args[5]) do
    local lines = {}
    for k = 1, records do
      lines[k] = '{"event_type":"dns","src_ip":"192.168.1.20","dest_ip":"192.0.2.53",'
        .. '"dns":{"type":"query","rrtype":"A","rrname":"' .. name() .. '.flood.example"}}'
    end
    bodies[b] = table.concat(lines, "\\n")
  end
end
request = function()
  local n = first + i % flooders
  local body = bodies[i % #bodies + 1]
  i = i + 1
  local mac = string.format("02:5a:00:00:%02x:%02x", math.floor(n / 256), n % 256)
  return wrk.format("POST", "/log/cfm", {["X-ID"] = mac,
    ["Content-Type"] = "application/x-ndjson"}, body)
end
"""


async def honest_uploads(port: int, seconds: float, pause: float,
                         stop: asyncio.Event) -> list[float]:
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
            await asyncio.sleep(pause)
    stop.set()
    return times


def honest_process(port: int, seconds: float, limits: str) -> list[float]:
    """The honest router's upload times, from a process of its own."""
    done = subprocess.run([sys.executable, "-m", "bench.hunt_flood", "--honest-only",
                           str(port), "--seconds", str(seconds), "--router-limits", limits],
                          capture_output=True, text=True, check=True)
    return orjson.loads(done.stdout)


def under_flood(port: int, server_pids: list[int], flooders: int, seconds: float, after: float,
                script: Path, limits: str, first: int = 0) -> tuple[list[float], dict]:
    """wrk floods for `after` seconds, then for the honest router's time, and 2 s more;
    the flooders' MACs are numbered from `first`."""
    flooded: dict = {}

    def flood() -> None:
        flooded.update(run_wrk(f"http://127.0.0.1:{port}/log/cfm", script,
                               int(after + seconds) + 2,
                               flooders, str(flooders), str(RECORDS_A_FLOOD), str(flooders),
                               str(first), str(BODIES), server_pids=server_pids))

    thread = threading.Thread(target=flood)
    thread.start()
    time.sleep(after)
    honest = honest_process(port, seconds, limits)
    thread.join()
    return honest, flooded


def flood_once(server, location, sql: Sql, script: Path, flooders: int, first: int,
               args: argparse.Namespace, indexing: bool, quiet_p50: float) -> list[float]:
    """One flood (MACs numbered from `first`) with the honest router's time in it, its line
    printed; the honest router's upload times."""
    sql.rows("TRUNCATE hunt_budgets")
    before = sql.value("SELECT count(*) FROM hunt_postings WHERE mac <> %s", (HONEST,))
    pids = [server.process.pid, *server.children("serving"),
            *server.children("working")]  # the supervisor's, with HTTP_WORKERS > 1
    honest, flooded = under_flood(server.port, pids, flooders, args.seconds, args.after,
                                  script, args.router_limits, first)
    behind = asyncio.run(await_indexed(location, INDEX_TIMEOUT)) if indexing \
        else float("nan")
    added = sql.value("SELECT count(*) FROM hunt_postings WHERE mac <> %s", (HONEST,)) - before
    most = sql.value("SELECT max(postings) FROM hunt_budgets WHERE mac <> %s", (HONEST,))
    unindexed = sql.value("SELECT sum(unindexed) FROM hunt_budgets")
    print(f"{flooders} flooder(s), wrk for {args.after + args.seconds + 2:.0f} s "
          f"(the honest router from {args.after:.0f} s): "
          f"{flooded['rate']:.0f} uploads a second of {RECORDS_A_FLOOD} random names "
          f"({flooded['non_2xx_3xx']} refused), wrk kept {flooded['wrk_cores']:.2f} "
          f"cores busy, the server {flooded['server_cores']:.2f}; the indexer read "
          f"every upload {behind:.1f} s after; the index grew by {added} postings, "
          f"the most one flooder posted {most} (budget {args.budget}), {unindexed} "
          f"records not indexed; the honest router's upload p50 "
          f"{statistics.median(honest) * 1000:.1f} ms ({len(honest)} uploads), "
          f"{statistics.median(honest) / quiet_p50:.2f}x the quiet one")
    return honest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flooders", default="1,100")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--after", type=float, default=2,
                        help="seconds of flood before the honest router's time begins (past "
                             "60, the flooders' first minute's allowance is spent: the "
                             "sustained flood)")
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--cycles", type=int, default=1,
                        help="quiet and flooded times measured in turn this many times (fresh "
                             "flooder MACs each), then pooled: the machine's drift falls on "
                             "both alike")
    parser.add_argument("--router-limits", choices=("default", "off"), default="default")
    add_settings_option(parser)
    parser.add_argument("--honest-only", type=int, metavar="PORT",
                        help="be the honest router against the server on PORT for --seconds, "
                             "printing its upload times (the benchmark starts it so)")
    args = parser.parse_args()
    if args.honest_only:
        times = asyncio.run(honest_uploads(args.honest_only, args.seconds,
                                           HONEST_PAUSE[args.router_limits], asyncio.Event()))
        print(orjson.dumps(times).decode())
        return 0
    settings = {**PER_ADDRESS, **dict(args.set)}
    indexing = "HUNT_INDEX_SECONDS" not in settings
    if not available():
        print("wrk is not installed (Debian package wrk)", file=sys.stderr)
        return 1
    with throwaway_database() as (location, workdir), \
            running_server(location, workdir, flood_limits=args.router_limits == "default",
                           HUNT_POSTINGS_PER_ROUTER_DAY=str(args.budget),
                           TELEMETRY_COMPACT_CRON_SCHEDULE="0 0 1 1 *",
                           **settings) as server, \
            tempfile.TemporaryDirectory() as scratch:
        sql = Sql(location)
        script = Path(scratch) / "flood.lua"
        script.write_text(FLOOD_SCRIPT)
        quiet_pooled: list[float] = []
        flooded_pooled: dict[int, list[float]] = {}
        ratios: dict[int, list[float]] = {}
        first = 0  # each flood's MACs fresh: their limits and budgets untouched
        for _ in range(args.cycles):
            quiet = honest_process(server.port, args.seconds, args.router_limits)
            quiet_pooled += quiet
            print(f"quiet: the honest router's upload p50 "
                  f"{statistics.median(quiet) * 1000:.1f} ms ({len(quiet)} uploads)")
            for flooders in (int(n) for n in args.flooders.split(",")):
                honest = flood_once(server, location, sql, script, flooders, first, args,
                                    indexing, statistics.median(quiet))
                first += flooders
                flooded_pooled.setdefault(flooders, []).extend(honest)
                ratios.setdefault(flooders, []).append(
                    statistics.median(honest) / statistics.median(quiet))
        if args.cycles > 1:
            for flooders, honest in flooded_pooled.items():
                print(f"{flooders} flooder(s) over {args.cycles} cycles: the honest router's "
                      f"upload p50 {statistics.median(quiet_pooled) * 1000:.1f} ms quiet, "
                      f"{statistics.median(honest) * 1000:.1f} ms flooded: "
                      f"{statistics.median(honest) / statistics.median(quiet_pooled):.2f}x "
                      f"(the cycles' ratios {', '.join(f'{r:.2f}' for r in ratios[flooders])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
