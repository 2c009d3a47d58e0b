"""Console benchmark: the page of a router with 30 days of telemetry, under wrk.

    python -m bench.console [--days 30] [--seconds 10] [--fleet 2000]

Publishes the corpus ruleset, stores one router's 30 days of telemetry as a router polling
every 5 minutes leaves it (an upload of 10 alerts and one of 50 flows every 5 minutes,
compacted into 1,000-record chunks, with their hourly summaries: 86,400 alerts and 432,000
flows), lets the server generate its payloads, signs in as support and loads the router's
page with wrk on one connection (one page at a time, as a person does). The reference is a
constant aiohttp handler under the same wrk run. Prints the page's mean and 99th percentile
latency, its ratio to the constant handler's, and what each side kept busy. Then the fleet
page, with --fleet routers more, each polling every 5 minutes for the last day (the day of
activations that page counts).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from http.cookiejar import CookieJar

import orjson

from bench.polling import start_constant
from bench.wrk import available, run_wrk
from server.console.auth import hash_secret
from server.db.connect import connect
from testkit.corpus import publish_corpus_ruleset
from testkit.database import Sql, throwaway_database
from testkit.server import ServerRunner, free_port
from testkit.telemetry import store_uploads
from testkit.waiting import generated_after

MAC = "aa:bb:cc:00:35:99"
USER, SECRET = "bench", "bench-secret-123456"
UPLOAD_MINUTES = 5
ALERTS_PER_UPLOAD, FLOWS_PER_UPLOAD = 10, 50
SIDS = [2018489, 2010935, 2010936, 2010937, 2010939, 2002910, 2100366, 2001219, 2003068]


def history(days: int) -> tuple[list, list]:
    """(event uploads, flow uploads) of one router, one each every UPLOAD_MINUTES."""
    rng = random.Random(35)
    now = datetime.now(timezone.utc)
    events, flows = [], []
    for step in range(days * 24 * 60 // UPLOAD_MINUTES, 0, -1):
        at = now - timedelta(minutes=step * UPLOAD_MINUTES)
        events.append((MAC, at, [orjson.dumps({
            "timestamp": at.isoformat(), "event_type": "alert", "flow_id": rng.getrandbits(40),
            "src_ip": f"198.51.100.{rng.randint(1, 40)}", "src_port": rng.randint(1024, 65535),
            "dest_ip": "192.168.1.10", "dest_port": rng.choice([22, 80, 443, 1433, 5432]),
            "proto": "TCP", "alert": {"action": "allowed", "signature_id": rng.choice(SIDS),
                                      "signature": "ET SCAN synthetic", "severity": 2}})
            for _ in range(ALERTS_PER_UPLOAD)]))
        flows.append((MAC, at, [orjson.dumps({
            "timestamp": at.isoformat(), "event_type": "flow", "proto": "TCP",
            "app_proto": rng.choice(["dns", "tls", "http"]), "src_ip": "192.168.1.10",
            "dest_ip": f"203.0.113.{rng.randint(1, 254)}", "dest_port": rng.choice([53, 443, 80]),
            "src_port": rng.randint(1024, 65535)}) for _ in range(FLOWS_PER_UPLOAD)]))
    return events, flows


def store_history(location, days: int) -> int:
    events, flows = history(days)
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("INSERT INTO routers (mac) VALUES (%s)", (MAC,))
            cur.execute("INSERT INTO generation_queue (mac) VALUES (%s)", (MAC,))
            store_uploads(cur, "events", events, 1_000)
            store_uploads(cur, "cfm", flows, 1_000)
            cur.execute("INSERT INTO activations (mac, activated_at, address) "
                        "SELECT %s, now() - make_interval(mins => 5 * n), '192.0.2.7' "
                        "FROM generate_series(1, 8 * 288) AS n", (MAC,))
    finally:
        conn.close()
    return sum(len(lines) for _, _, lines in events + flows)


def store_fleet(location, routers: int) -> None:
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("INSERT INTO routers (mac) SELECT ('02:00:' || lpad(to_hex(n >> 24), 2, "
                        "'0') || ':' || lpad(to_hex((n >> 16) & 255), 2, '0') || ':' || "
                        "lpad(to_hex((n >> 8) & 255), 2, '0') || ':' || "
                        "lpad(to_hex(n & 255), 2, '0'))::macaddr "
                        "FROM generate_series(1, %s) AS n", (routers,))
            cur.execute("INSERT INTO activations (mac, activated_at, address) "
                        "SELECT mac, now() - make_interval(mins => 5 * n), '192.0.2.8' "
                        "FROM routers, generate_series(1, 288) AS n WHERE mac <> %s", (MAC,))
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("ANALYZE")
    finally:
        conn.close()


def wait_generated(location, timeout: float = 300) -> None:
    asyncio.run(generated_after(Sql(location), "-infinity", [MAC], timeout))


def session_cookie(console: str) -> str:
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(console + "/console/sign-in").read().decode()
    token = re.search(r'name="token" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"token": token, "name": USER, "secret": SECRET}).encode()
    opener.open(console + "/console/sign-in", data=form).read()
    return next(f"{c.name}={c.value}" for c in jar if c.name == "console_session")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--fleet", type=int, default=2000)
    args = parser.parse_args()
    if not available():
        print("wrk is not installed (Debian package wrk)", file=sys.stderr)
        return 1
    with throwaway_database() as (location, workdir):
        ruleset = publish_corpus_ruleset(location, workdir)
        started = time.monotonic()
        records = store_history(location, args.days)
        print(f"stored {records} records of {args.days} days in "
              f"{time.monotonic() - started:.0f} s")
        users = f"{USER}:support:{hash_secret(SECRET)}"
        server = ServerRunner(location, workdir, CONSOLE_USERS=users,
                              CONSOLE_SECRET="b" * 40, **ruleset).start()
        constant_port = free_port()
        constants = start_constant(constant_port, 1)
        try:
            wait_generated(location)
            cookie = session_cookie(server.url)
            page = run_wrk(f"{server.url}/console/routers/{MAC}", None, args.seconds, 1,
                           server_pids=[server.process.pid], headers={"Cookie": cookie})
            constant = run_wrk(f"http://127.0.0.1:{constant_port}/rules/ids", None,
                               args.seconds, 1, server_pids=[p.pid for p in constants])
            store_fleet(location, args.fleet)
            fleet = run_wrk(f"{server.url}/console/", None, args.seconds, 1,
                            server_pids=[server.process.pid], headers={"Cookie": cookie})
        finally:
            for process in constants:
                process.terminate()
            server.stop()
    mean_ms = 1000 / page["rate"]
    constant_ms = 1000 / constant["rate"]
    print(f"router page, {args.days} days of telemetry: {mean_ms:.1f} ms mean, "
          f"p99 {page['p99_ms']:.1f} ms ({page['requests']} pages, "
          f"{page['non_2xx_3xx']} not 2xx/3xx); server {page['server_cores']:.2f} cores, "
          f"wrk {page['wrk_cores']:.2f}")
    print(f"constant aiohttp handler: {constant_ms:.2f} ms mean, p99 "
          f"{constant['p99_ms']:.2f} ms; the page costs {mean_ms / constant_ms:.0f}x a "
          f"constant answer")
    fleet_ms = 1000 / fleet["rate"]
    print(f"fleet page, {args.fleet + 1} routers and a day of their polls "
          f"({(args.fleet + 1) * 288} activations): {fleet_ms:.0f} ms mean, p99 "
          f"{fleet['p99_ms']:.0f} ms ({fleet['non_2xx_3xx']} not 2xx/3xx)")
    return 0 if page["non_2xx_3xx"] == 0 and page["p99_ms"] < 200 else 1


if __name__ == "__main__":
    sys.exit(main())
