"""Hostile-member drill (issue 50): the fleet's consensus holds against its own routers.

    python -m bench.fleet_hostile_drill [--honest 8] [--flood 2000]

The real server in key mode behind a trusted proxy (loopback; each router's address sent as
X-Forwarded-For, as Caddy would), routers enrolled with the fleet's token and aged in the
database (registration and key issued 10 days ago) unless a case says otherwise. Reports are
the corpus's real ET SCAN alerts (testkit/fleet.py). The honest routers, each on a /24 of
its own, report the real attacker A; each hostile case then tries one bypass the release
before allowed:

1. five routers that once polled from five /24s upload X1 from one address: credited to one;
2. five routers registered long ago whose keys were issued today (a reset, a new enrollment)
   report X2;
3. hostile routers of enough networks report every special-purpose range in every spelling
   (IPv4-mapped, -compatible, NAT64 well-known and local-use, 6to4, Teredo, 3fff::/20,
   5f00::/16, fec0::/10 ...), --flood sources in all, with FLEET_MAX_ENTRIES 50: none is
   listed and A still is (the rails run before the limit);
4. the same routers report an honest router's poll address as ::ffff:, 64:ff9b::, ::a.b.c.d
   and its 6to4 site, and the IPv4 address and site of a router polling over 6to4: none is
   listed;
5. six routers on 6to4 addresses inside one IPv4 /24 report X3 (one network), five on /48s
   of one tunnel broker's /32 report X4 (three), and one of the first with the five X5
   (four): none listed;
6. one router reports --flood distinct public sources: counted past its bound, A listed;
7. the document's ETag holds while the honest reports grow and a reporter moves network;
8. an X-Forwarded-For of `fe80::1%eth0` from the proxy is a 400, not a 500.
After all of it, every honest router gets A at its next poll and nothing else.

Prints each check and PASSED or FAILED (exit status 0 or 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import aiohttp

from bench.fleet_drill import TOKEN, Router, own_network
from server.db.location import DatabaseLocation
from testkit.database import Sql, database_env, throwaway_database
from testkit.fleet import attack_body
from testkit.server import ServerRunner, router_backend_output

A = "45.33.32.156"  # the real attacker
# What each hostile case tries to get listed: one address per case, so no two cases add up.
X_ONE_ADDRESS, X_NEW_KEYS, X_SIXTOFOUR, X_BROKER, X_ALL = (
    "45.33.32.201", "45.33.32.202", "45.33.32.203", "45.33.32.204", "45.33.32.205")


def special_sources(count: int) -> list[str]:
    """`count` sources in special-purpose ranges, every spelling in turn."""
    forms = [lambda n: f"::ffff:10.{n // 256 % 256}.{n % 256}.1",
             lambda n: f"64:ff9b::a{n % 16:x}{n // 16 % 16:x}:{n % 65536:x}",
             lambda n: f"2002:c0a8:{n % 65536:x}::1",                # 6to4 of 192.168/16
             lambda n: f"::172.16.{n // 256 % 256}.{n % 256}",
             lambda n: f"64:ff9b:1::{n % 65536:x}",                  # local-use NAT64
             lambda n: f"2001:0:4136:e378:8000:63bf:{n % 65536:x}:fdd2",  # Teredo
             lambda n: f"3fff::{n % 65536:x}", lambda n: f"5f00::{n % 65536:x}",
             lambda n: f"fec0::{n % 65536:x}", lambda n: f"100:0:0:1::{n % 65536:x}",
             lambda n: f"100.64.{n // 256 % 256}.{n % 256}", lambda n: f"192.0.0.{n % 256}",
             lambda n: f"2001:db8::{n % 65536:x}", lambda n: f"fd00::{n % 65536:x}",
             lambda n: f"198.18.{n // 256 % 256}.{n % 256}", lambda n: f"240.0.0.{n % 256}"]
    return [forms[n % len(forms)](n) for n in range(count)]


def flood_body(sources: list[str]) -> bytes:
    """One scan alert of the corpus from each source."""
    return b"\n".join(attack_body(source).split(b"\n", 1)[0] for source in sources)


async def upload(router: Router, body: bytes, address: str | None = None) -> None:
    headers = router.headers(**{"Content-Type": "application/x-ndjson"})
    if address is not None:
        headers["X-Forwarded-For"] = address
    async with router.session.post(f"{router.url}/log/events", data=body,
                                   headers=headers) as response:
        answer = await response.json()
        assert response.status == 200 and answer["rejected"] == 0, answer


async def make(session, url: str, sql: Sql, first: int, addresses: list[str],
               aged: bool = True, key_today: bool = False) -> list[Router]:
    routers = [Router(session, url, first + n, address) for n, address in enumerate(addresses)]
    for router in routers:
        await router.enroll()
        await router.poll()
    macs = [router.mac for router in routers]
    if aged:
        sql.rows("UPDATE routers SET registered_at = now() - interval '10 days' "
                 "WHERE mac = ANY(%s::macaddr[])", (macs,))
        if not key_today:
            sql.rows("UPDATE router_keys SET issued_at = now() - interval '10 days' "
                     "WHERE mac = ANY(%s::macaddr[])", (macs,))
    return routers


def listed(entries_of: list[dict | None]) -> set[str]:
    return {address for entries in entries_of if entries for address in entries}


async def drill(url: str, env: dict[str, str], sql: Sql, honest_count: int, flood: int
                ) -> list[tuple[str, bool]]:
    checks = []
    async with aiohttp.ClientSession() as session:
        honest = await make(session, url, sql, 0, [own_network(n) for n in range(honest_count)])
        one_address = await make(session, url, sql, 100,
                                 [f"83.{n + 1}.1.7" for n in range(5)])
        new_keys = await make(session, url, sql, 200, [f"84.{n + 1}.1.7" for n in range(5)],
                              key_today=True)
        # More networks than the honest routers: under the release before, their sources
        # ranked first and filled the limit.
        hostile = await make(session, url, sql, 300,
                             [f"85.{n + 1}.1.7" for n in range(honest_count + 2)])
        sixtofour = await make(session, url, sql, 400,
                               [f"2002:5601:1{n:02x}::1" for n in range(6)])  # 86.1.1.0/24
        broker = await make(session, url, sql, 500,
                            [f"2001:470:{n + 1:x}::1" for n in range(5)])
        flooder = (await make(session, url, sql, 600, ["87.1.1.7"]))[0]
        await make(session, url, sql, 700, ["2002:5db8:d822:1::5"])  # polls over 6to4
        for router in honest:
            await router.report(A)
        for router in one_address:  # polled from five /24s, uploads from one address
            await upload(router, attack_body(X_ONE_ADDRESS), "83.99.1.7")
        for group, target in ((new_keys, X_NEW_KEYS), (sixtofour, X_SIXTOFOUR),
                              (broker, X_BROKER)):
            for router in group:
                await router.report(target)
        # One network short each way: the 6to4 crowd and the broker's /48s together.
        for router in sixtofour[:1] + broker:
            await router.report(X_ALL)
        victim = honest[1].address
        spellings = [f"::ffff:{victim}", f"::{victim}",
                     "64:ff9b::{:02x}{:02x}:{:02x}{:02x}".format(*map(int, victim.split("."))),
                     "2002:{:02x}{:02x}:{:02x}{:02x}::1".format(*map(int, victim.split("."))),
                     "93.184.216.34", "2002:5db8:d822:7::1"]  # the 6to4 poller's IPv4, site
        specials = special_sources(flood)
        for router in hostile:
            await upload(router, flood_body(specials + spellings))
        await upload(flooder, flood_body([f"46.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"
                                          for n in range(flood)]))
        detail = router_backend_output(env, "fleet", "run")
        print(f"fleet job: {detail.strip()}")
        polls = await asyncio.gather(*(router.poll() for router in honest))
        got = listed(polls)
        checks.append((f"A reported by {honest_count} honest routers reaches every one",
                       all(entries and A in entries for entries in polls)))
        checks.append((f"nothing else is listed (listed: {sorted(got)[:5]})", got == {A}))
        stored = {row[0] for row in sql.rows("SELECT host(address) FROM fleet_attackers")}
        checks.append(("1-5. the hostile cases' addresses, the special ranges and the poll "
                       f"address in every spelling: in the operators' table neither ({stored})",
                       stored == {A}))
        checks.append(("6. the flooding router's sources past its bound were counted, not "
                       "listed", "over_router_bound=" in detail
                       and "over_router_bound=0 " not in detail + " "))
        etag = honest[0].fleet_etag
        for router in honest:  # the attack goes on: counts grow
            await router.report(A)
        await upload(honest[2], attack_body(A), "88.1.1.7")  # a reporter moves network
        router_backend_output(env, "fleet", "run")
        await asyncio.sleep(0.3)
        again = await asyncio.gather(*(router.poll() for router in honest))
        checks.append(("7. the document's ETag holds while counts grow and a reporter moves",
                       all(entries is None for entries in again)
                       and honest[0].fleet_etag == etag))
        async with session.get(f"{url}/rules/last_updated", headers=honest[0].headers(
                **{"X-Forwarded-For": "fe80::1%eth0"})) as response:
            checks.append((f"8. X-Forwarded-For fe80::1%eth0: {response.status}",
                           response.status == 400
                           and "X-Forwarded-For" in (await response.json())["error"]))
    return checks


def hostile_drill(location: DatabaseLocation, workdir: Path, honest: int, flood: int
                  ) -> list[tuple[str, bool]]:
    settings = {"ROUTER_AUTH": "key", "ENROLLMENT_TOKEN": TOKEN,
                "RULE_GENERATION_ENABLED": "false", "FLEET_MAX_ENTRIES": "50",
                "FLEET_MAX_PER_ROUTER": str(max(100, flood // 4)),
                "FLEET_CRON_SCHEDULE": "0 0 1 1 *"}  # the drill runs the job itself
    server = ServerRunner(location, workdir, **settings).start()
    env = {**os.environ, **database_env(location), "DATA_DIR": str(workdir),
           "DB_LOG_LEVEL": "error", **settings}
    try:
        return asyncio.run(drill(server.url, env, Sql(location), honest, flood))
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--honest", type=int, default=8)
    parser.add_argument("--flood", type=int, default=2000)
    args = parser.parse_args()
    started = time.monotonic()
    with throwaway_database() as (location, workdir):
        checks = hostile_drill(location, workdir, args.honest, args.flood)
    for label, passed in checks:
        print(f"{'ok  ' if passed else 'FAIL'} {label}")
    passed = all(ok for _, ok in checks)
    print(f"{'PASSED' if passed else 'FAILED'} in {time.monotonic() - started:.1f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
