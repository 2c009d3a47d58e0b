"""Serving the fleet's shared list under wrk, against today's 304 path.

    python -m bench.fleet_serving [--routers 300] [--entries 10000] [--seconds 10]
                                      [--rounds 3]

The real server (one process) with --routers routers, each with a stored firewall payload,
and a fleet list of --entries attackers (written as the job writes it). wrk (1 thread, 32
connections; a Lua script cycles through the routers with X-ID and If-None-Match) loads, in
alternating rounds, best of each:
- the reference, today's 304 path: GET /rules/firewall naming the router's current ETag;
- GET /rules/fleet naming the list's current ETag (what nearly every agent poll of it is);
- GET /rules/fleet without it (the whole list, gzip), what each router fetches once per
  change of the list.
Prints requests/s, p99 and each one's ratio to the reference, the cores wrk and the server
kept busy (which side saturated), and the list's size per entry.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime, timedelta, timezone

import aiohttp

from bench.wrk import POLL_SCRIPT, available, router_file, run_wrk
from server.fleet import sql as fleet_db
from server.db.lifecycle import open_database
from server.settings import load_settings
from testkit.database import database_env, throwaway_database
from testkit.payloads import store_payload_objects
from testkit.server import ServerRunner

HOUR = "%Y-%m-%dT%H:00:00Z"


def mac(number: int) -> str:
    return f"02:47:00:00:{number // 256:02x}:{number % 256:02x}"


def attackers(count: int) -> list[dict]:
    """Entries shaped as the job stores them: a scanner per /24 of one range."""
    now = datetime.now(timezone.utc)
    first, last = (now - timedelta(hours=20)).strftime(HOUR), now.strftime(HOUR)
    return [{"address": f"45.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}",
             "routers": 5 + n % 900, "networks": 5 + n % 800, "alerts": 40 + n,
             "severity": 1 + n % 2, "signatures": [2010935 + k for k in range(1 + n % 8)],
             "first_seen": first, "last_seen": last,
             "expires_at": (now + timedelta(hours=25)).strftime(HOUR), "reporters": []}
            for n in range(count)]


async def prepare(location, workdir, routers: list[str], entries: int) -> None:
    settings = load_settings({**database_env(location), "DATA_DIR": str(workdir)},
                             env_file=None)
    async with open_database(settings) as db:
        for router in routers:
            await store_payload_objects(db, router, {"firewall": {
                "version": "1", "entry_count": 0, "truncated": False, "entries": []}})
        await fleet_db.replace(db, attackers(entries), [])


async def etags(url: str, routers: list[str]) -> tuple[dict[str, str], str, int]:
    """Each router's firewall ETag (registering it), the fleet list's ETag and its size."""
    found = {}
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for router in routers:
            async with session.get(f"{url}/rules/firewall", headers={"X-ID": router}) as answer:
                assert answer.status == 200, answer.status
                found[router] = answer.headers["ETag"]
        async with session.get(f"{url}/rules/fleet", headers={
                "X-ID": routers[0], "Accept-Encoding": "gzip"}) as answer:
            return found, answer.headers["ETag"], len(await answer.read())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=300)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not available():
        print("wrk is not installed (Debian package wrk)", file=sys.stderr)
        return 1
    routers = [mac(n) for n in range(args.routers)]
    runs: dict[str, list[dict]] = {"firewall 304": [], "fleet 304": [], "fleet 200": []}
    with throwaway_database() as (location, workdir):
        asyncio.run(prepare(location, workdir, routers, args.entries))
        server = ServerRunner(location, workdir, RULE_GENERATION_ENABLED="false",
                              TELEMETRY_COMPACT_CRON_SCHEDULE="0 0 1 1 *",
                              FLEET_CRON_SCHEDULE="0 0 1 1 *").start()
        try:
            firewall, fleet_etag, size = asyncio.run(etags(server.url, routers))
            scripts = {}
            for name, path in (("firewall", "/rules/firewall"), ("fleet", "/rules/fleet")):
                scripts[name] = workdir / f"{name}.lua"
                scripts[name].write_text(POLL_SCRIPT.replace("/rules/ids", path))
            files = {"firewall 304": router_file(workdir / "firewall.tsv", firewall),
                     "fleet 304": router_file(workdir / "fleet.tsv", dict.fromkeys(
                         routers, fleet_etag)),
                     "fleet 200": router_file(workdir / "plain.tsv", firewall,
                                              with_etags=False)}
            pids = [server.process.pid]
            for name in runs:  # warm-up
                run_wrk(server.url, scripts[name.split()[0]], 2, 32, str(files[name]))
            for _ in range(args.rounds):
                for name in runs:
                    runs[name].append(run_wrk(server.url, scripts[name.split()[0]],
                                              args.seconds, 32, str(files[name]),
                                              server_pids=pids))
        finally:
            server.stop()
    if any(run["non_2xx_3xx"] for kind in runs.values() for run in kind):
        raise RuntimeError(f"answers other than 2xx/3xx: {runs}")
    best = {name: max(kind, key=lambda run: run["rate"]) for name, kind in runs.items()}
    reference = best["firewall 304"]["rate"]
    print(f"{args.routers} routers; a fleet list of {args.entries:,} entries: {size:,} bytes "
          f"gzip ({size / args.entries:.1f} per entry); wrk 1 thread, 32 connections, "
          f"{args.rounds} x {args.seconds} s alternating (best)")
    for name, label in (("firewall 304", "GET /rules/firewall 304 (reference)"),
                        ("fleet 304", "GET /rules/fleet 304"),
                        ("fleet 200", "GET /rules/fleet 200 gzip")):
        run = best[name]
        print(f"{label:36} {run['rate']:>8,.0f} req/s  p99 {run['p99_ms']:6.1f} ms  "
              f"ratio {run['rate'] / reference:.2f}  (cores busy: wrk {run['wrk_cores']:.2f}, "
              f"server {run['server_cores']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
