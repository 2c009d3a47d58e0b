"""Enforcement week drill (issue 82): ROUTERS routers on ROUTERS/4 networks report what their
firewall sets dropped (POST /rules/enforced) to a real server process over HTTP, once a day
for a simulated week (each day's rows moved back a day after it, the service counting a
report for the day it arrives); 100 fresh MACs of 100 networks and 30 established routers of
one network report huge counts for two values of a feed nobody else matched, and huge
alerts of the IDS rules they carry as flowbit setters. Then the
fleet's figures (`router-backend enforcement --days 7 --json`) are checked against the
truth planted.

    python -m bench.enforcement_week [--routers 1000]

Checks:
- per list and per feed, every figure (routers, networks, matched, packets, bytes, alerts,
  values matched and never matched) is the planted one;
- the fresh MACs' value matched nowhere (they count for nothing), the one network's value at
  one network, ranked below every value of the honest fleet;
- an entry never sent to a router is ignored, not stored.
Prints the stored bytes per router and day, and the reports' median and p99 over HTTP
against POST /rules/applied's (an applied report, one upsert) in the same run.
tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import orjson

from bench.checks import Checks
from server.db.location import DatabaseLocation
from server.db.pool import Database
from server.enforcement.store import MAX_ALERTS
from server.fleet import sql as fleet_db
from server.generation.rules_sql import store_payloads
from server.intel import sql as intel_db
from server.telemetry.indicators import feed_value
from testkit.database import command_env, settings_for, throwaway_database
from testkit.server import ServerRunner, router_backend_output

DAYS = 7
FLEET = [f"77.88.1.{k}" for k in range(20)]
FEEDS = {"alpha": [f"81.2.0.{2 * k}" for k in range(100)],
         "beta": [f"81.3.0.{2 * k}" for k in range(50)],
         "quiet": [f"81.4.0.{2 * k}" for k in range(30)]}
FRESH_VALUE, CROWD_VALUE = FEEDS["quiet"][0], FEEDS["quiet"][1]
HUGE = 10 ** 12
CONCURRENCY = 8


def mac(prefix: str, n: int) -> str:
    return f"{prefix}:00:00:{n >> 8:02x}:{n & 255:02x}"


def network_address(n: int) -> str:
    """Router n's address: four routers a /24."""
    group = n // 4
    return f"47.{group >> 8}.{group & 255}.{1 + n % 4}"


def own(n: int) -> str:
    return f"62.{n >> 8}.{n & 255}.5"


def report(n: int, day: int) -> dict:
    """What router n's firewall dropped on `day`."""
    entries = [{"address": own(n), "packets": 1 + (n + day) % 5, "bytes": 0}]
    intel = [{"address": FEEDS["alpha"][n % 100], "packets": 3, "bytes": 300}]
    if n % 4 == 0:
        intel.append({"address": FEEDS["beta"][(n // 4) % 50], "packets": 1, "bytes": 100})
    for entry in entries:
        entry["bytes"] = entry["packets"] * 60
    return {"lists": {
        "firewall": {"packets": entries[0]["packets"], "bytes": entries[0]["bytes"],
                     "entries": entries + [{"address": "62.255.255.5", "packets": 0,
                                            "bytes": 0}]},  # never sent: ignored
        "fleet": {"packets": 2, "bytes": 120,
                  "entries": [{"address": FLEET[n % 20], "packets": 2, "bytes": 120}]},
        "intel": {"packets": sum(e["packets"] for e in intel),
                  "bytes": sum(e["bytes"] for e in intel), "alerts": 1, "entries": intel},
        "ids": {"fired": fired_alerts(n), "sampled": 1, "flowbits": 0}}}


def fired_alerts(n: int) -> int:
    """Router n's alerts a day of the rules it carries for its own alerts: on every other
    network only."""
    return 1 + n % 3 if (n // 4) % 2 == 0 else 0


def huge(value: str) -> dict:
    return {"lists": {"intel": {"packets": HUGE, "bytes": HUGE, "entries": [
        {"address": value, "packets": HUGE, "bytes": HUGE}]}, "ids": {"flowbits": HUGE}}}


@dataclass
class WeekResult(Checks):
    routers: int = 0
    reports: int = 0
    stored_bytes_per_router_day: float = 0.0
    report_ms: list = field(default_factory=list)
    applied_ms: list = field(default_factory=list)  # the reference: POST /rules/applied


async def _post(session, url: str, router: str, address: str, body: dict,
                result: WeekResult) -> None:
    started = time.perf_counter()
    async with session.post(f"{url}/rules/enforced", data=orjson.dumps(body), headers={
            "X-ID": router, "X-Forwarded-For": address,
            "Content-Type": "application/json"}) as answer:
        stored = await answer.json()
        result.check(answer.status == 200, f"{router}: {answer.status} {stored}")
    result.report_ms.append((time.perf_counter() - started) * 1000)
    result.reports += 1
    if "firewall" in body["lists"]:
        result.check(stored["lists"]["firewall"]["ignored"] == 1, f"{router}: {stored}")


async def _all(jobs) -> None:
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(job):
        async with limit:
            await job
    await asyncio.gather(*(one(job) for job in jobs))


async def _plant(location: DatabaseLocation, honest: list[str]) -> None:
    db = await Database.open(location, 0, 2, 30)
    try:
        for n, router in enumerate(honest):
            payload = {"version": "drill", "entry_count": 1, "truncated": False, "entries": [
                {"address": own(n), "family": 4, "reasons": ["alert"]}]}
            await store_payloads(db, router, {"firewall": (
                gzip.compress(orjson.dumps(payload)), f"own-{n}")})
        await fleet_db.replace(db, [{
            "address": address, "routers": 8, "networks": 8, "alerts": 96, "severity": 2,
            "signatures": [2010935], "first_seen": "2026-11-26T01:00:00Z",
            "last_seen": "2026-11-26T02:00:00Z", "expires_at": "2099-11-27T03:00:00Z",
            "reporters": []} for address in FLEET], [])
        now = datetime.now(timezone.utc)
        for name, values in FEEDS.items():
            await intel_db.add_feed(db, name, None, "plain", None, 50, "drill")
            taken = [("ip", feed_value("ip", value), 50, now, now, now + timedelta(days=30))
                     for value in values]
            await intel_db.swap_version(db, name, taken, len(taken), {}, None, None, "drill")
            async with db.transaction() as cur:
                await intel_db.mark_hunted(cur, [(kind, value) for kind, value, *_ in taken])
        await db.execute("UPDATE routers SET registered_at = now() - interval '4 days'")
    finally:
        await db.close()


async def _value(location: DatabaseLocation, statement: str):
    db = await Database.open(location, 0, 1, 30)
    try:
        return (await db.fetchrow(statement))[0]
    finally:
        await db.close()


async def _until_recorded(location: DatabaseLocation, entries: int, timeout: float) -> None:
    """Until the intel document served is recorded with its `entries` block entries."""
    held = ("SELECT count(*) FROM document_items WHERE document = 'intel-10000' "
            "AND place = 'block' AND until_serial IS NULL")
    async with asyncio.timeout(timeout):
        while await _value(location, held) < entries:
            await asyncio.sleep(0.1)


async def enforcement_week(location: DatabaseLocation, workdir: Path, routers: int = 1000
                           ) -> WeekResult:
    result = WeekResult(routers=routers)
    honest = [mac("02:88", n) for n in range(routers)]
    crowd = [mac("02:89", n) for n in range(30)]
    fresh = [mac("02:8a", n) for n in range(100)]
    server = ServerRunner(location, workdir / "server", FLEET_CRON_SCHEDULE="0 0 1 1 *").start()
    try:
        async with aiohttp.ClientSession() as session:
            async def poll(router: str, address: str) -> None:
                async with session.get(f"{server.url}/rules/last_updated", headers={
                        "X-ID": router, "X-Forwarded-For": address}) as answer:
                    result.check(answer.status == 200, f"{router}: poll {answer.status}")
            await _all([poll(router, network_address(n)) for n, router in enumerate(honest)]
                       + [poll(router, "48.0.0.1") for router in crowd])
            await _plant(location, honest + crowd)
            for router in fresh:  # registered now: they count for nothing
                await poll(router, "49.0.0.1")
            async with session.get(f"{server.url}/rules/intel",
                                   headers={"X-ID": honest[0]}) as answer:
                document = orjson.loads(await answer.read())
            result.check(len(document["block"]) == sum(map(len, FEEDS.values())),
                         f"intel document: {len(document['block'])} entries")
            await _until_recorded(location, len(document["block"]), 60)
            for day in range(DAYS):
                await _all([_post(session, server.url, router, network_address(n),
                                  report(n, day), result) for n, router in enumerate(honest)])
                if day == DAYS - 1:
                    await _all([_post(session, server.url, router, "48.0.0.1",
                                      huge(CROWD_VALUE), result) for router in crowd]
                               + [_post(session, server.url, router, f"49.{n}.0.1",
                                        huge(FRESH_VALUE), result)
                                  for n, router in enumerate(fresh)])
                else:  # the day's reports moved back, as if received DAYS - 1 - day ago
                    back = DAYS - 1 - day
                    for table in ("enforcement_days", "enforcement_hits"):
                        await _value(location, f"WITH moved AS (UPDATE {table} SET day = "
                                     f"day - {back} WHERE day = (now() AT TIME ZONE 'UTC')::date "
                                     "RETURNING 1) SELECT count(*) FROM moved")
            async def applied(router: str) -> None:  # the reference, in the same run
                started = time.perf_counter()
                async with session.post(f"{server.url}/rules/applied", json={
                        "ids_etag": None, "firewall_etag": None, "ok": True},
                        headers={"X-ID": router}) as answer:
                    result.check(answer.status == 200, f"applied {answer.status}")
                result.applied_ms.append((time.perf_counter() - started) * 1000)
            await _all([applied(router) for router in honest])
        stored = await _value(location, "SELECT pg_total_relation_size('enforcement_days') "
                                        "+ pg_total_relation_size('enforcement_hits')")
        result.stored_bytes_per_router_day = stored / (routers * DAYS)
        figures = orjson.loads(await asyncio.to_thread(
            router_backend_output, command_env_for(location, workdir), "enforcement",
            "--days", "7", "--json"))
        _check(result, figures, routers)
    finally:
        server.stop()
    return result


def command_env_for(location: DatabaseLocation, workdir: Path) -> dict:
    return command_env(settings_for(location, workdir / "server"))


def _check(result: WeekResult, figures: dict, routers: int) -> None:
    networks = (routers + 3) // 4
    lists = {row["list"]: row for row in figures["lists"]}
    firewall_packets = sum(1 + (n + day) % 5 for n in range(routers) for day in range(DAYS))
    expected = {
        "firewall": (routers, networks, routers, networks, firewall_packets,
                     firewall_packets * 60, 0, routers),
        "fleet": (routers, networks, routers, networks, 2 * routers * DAYS,
                  120 * routers * DAYS, 0, min(routers, 20)),
        "intel": (routers + 30, networks + 1, routers + 30, networks + 1, None, None,
                  routers * DAYS, None),
        # The IDS rules by source: the crowd's huge counts kept at a day's bound and at one
        # network, the fresh MACs' at none.
        "ids.fired": (routers, networks, sum(1 for n in range(routers) if fired_alerts(n)),
                      len({n // 4 for n in range(routers) if fired_alerts(n)}), 0, 0,
                      DAYS * sum(map(fired_alerts, range(routers))), 0),
        "ids.sampled": (routers, networks, routers, networks, 0, 0, routers * DAYS, 0),
        "ids.flowbits": (routers + 30, networks + 1, 30, 1, 0, 0, 30 * MAX_ALERTS, 0)}
    for name, want in expected.items():
        row = lists.get(name)
        result.check(row is not None, f"list {name} missing")
        if row is None:
            continue
        got = (row["routers"], row["networks"], row["matched_routers"],
               row["matched_networks"], row["packets"], row["bytes"], row["alerts"],
               row["entries_matched"])
        result.check(all(w is None or w == g for w, g in zip(want, got)),
                     f"list {name}: {got}, planted {want}")
    result.check(lists.get("fleet", {}).get("entries_never_matched") == 20 - min(routers, 20),
                 "fleet: entries never matched")
    beta_routers = len(range(0, routers, 4))
    feeds = {row["feed"]: row for row in figures["feeds"]}
    want_feeds = {
        "alpha": (100, min(routers, 100), routers, networks, 3 * routers * DAYS),
        "beta": (50, min(beta_routers, 50), beta_routers, beta_routers, beta_routers * DAYS),
        "quiet": (30, 1, 30, 1, 30 * HUGE)}
    for name, want in want_feeds.items():
        row = feeds.get(name, {})
        got = (row.get("values"), row.get("values_matched"), row.get("matched_routers"),
               row.get("matched_networks"), row.get("packets"))
        result.check(got == want, f"feed {name}: {got}, planted {want}")
    top = [entry for entry in figures["top"] if entry["list"] == "intel"]
    crowd_rank = [entry for entry in top if entry["entry"] == f"{CROWD_VALUE}/32"]
    result.check(all(entry["entry"] != f"{FRESH_VALUE}/32" for entry in top),
                 "the fresh MACs' value is ranked")
    result.check(not crowd_rank or crowd_rank[0]["networks"] == 1,
                 f"the one network's value: {crowd_rank}")
    result.check(top and top[0]["networks"] > 1 and
                 top[0]["entry"] != f"{CROWD_VALUE}/32", f"the top entry: {top[:1]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.enforcement_week",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--routers", type=int, default=1000)
    args = parser.parse_args(argv)
    with throwaway_database() as (location, workdir):
        started = time.perf_counter()
        result = asyncio.run(enforcement_week(location, workdir, args.routers))
        seconds = time.perf_counter() - started
    times = sorted(result.report_ms)
    reference = statistics.median(result.applied_ms)
    print(f"{result.routers} routers, {DAYS} days, {result.reports} reports over HTTP in "
          f"{seconds:.0f} s")
    print(f"stored: {result.stored_bytes_per_router_day:,.0f} bytes a router-day "
          "(enforcement_days and enforcement_hits with their indexes; three block lists "
          "and three IDS rule sources, three to four entries matched)")
    print(f"a report: median {statistics.median(times):.1f} ms, p99 "
          f"{times[int(len(times) * 0.99)]:.1f} ms ({CONCURRENCY} at once); "
          f"{statistics.median(times) / reference:.2f}x the median of POST /rules/applied "
          f"in the same run ({reference:.1f} ms)")
    print("checks: " + ("all held" if result.ok else "; ".join(result.failures)))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
