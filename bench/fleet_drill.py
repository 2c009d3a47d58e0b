"""Fleet drill (issue 46): the fleet defends each router, and cannot be turned against one.

    python -m bench.fleet_drill [--routers 60]

The real server in key mode behind a trusted proxy (loopback; each router's address sent
as X-Forwarded-For), --routers routers enrolled with the fleet's token, each polling from a
/24 of its own and registered and keyed days ago (the ages are set in the database). Reports are the
corpus's real ET SCAN alerts (testkit/fleet.py) with the attacker's address. Then:

1. 8 routers report attacker A: after the fleet job, every one of the routers gets A from
   GET /rules/fleet at its next poll (its /rules/last_updated names a new ETag), with the
   evidence for operators (8 routers, 8 networks, the alerts' signatures);
2. attacker B reported by 20 more routers, all behind one /24: listed for none;
3. attacker C reported by 8 routers younger than FLEET_MIN_ROUTER_AGE_HOURS: listed for none;
4. attacker D, on the fleet's allowlist, reported by the 8 of case 1: listed for none;
5. attacker E, the address one router polls from, reported by the same 8: listed for none;
6. A vetoed by an operator's allowlist entry: gone from every router's next poll, before the
   job runs again.

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

from server.db.location import DatabaseLocation

from testkit.database import Sql, database_env, throwaway_database
from testkit.fleet import attack_body, sids
from testkit.server import ServerRunner, router_backend_output

TOKEN = "fleet-drill-enrollment-token-0123456789"
A, B, C, D = "45.33.32.156", "45.33.32.157", "45.33.32.158", "45.33.32.159"
REPORTERS = 8


def mac(n: int) -> str:
    return f"02:46:00:00:{n // 256:02x}:{n % 256:02x}"


def own_network(n: int) -> str:
    """Router n's poll address, in a /24 of its own."""
    return f"81.{n // 250 + 1}.{n % 250}.7"


class Router:
    def __init__(self, session: aiohttp.ClientSession, url: str, number: int, address: str):
        self.session, self.url, self.mac, self.address = session, url, mac(number), address
        self.key = ""
        self.fleet_etag = ""

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"X-ID": self.mac, "X-Forwarded-For": self.address, **extra}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        return headers

    async def enroll(self) -> None:
        async with self.session.post(f"{self.url}/enroll", headers=self.headers(
                Authorization=f"Bearer {TOKEN}")) as response:
            assert response.status == 201, await response.text()
            self.key = (await response.json())["key"]

    async def poll(self) -> dict[str, dict] | None:
        """One agent poll: /rules/last_updated, then the fleet's list when its ETag moved;
        the entries (None when nothing moved)."""
        async with self.session.get(f"{self.url}/rules/last_updated",
                                    headers=self.headers()) as response:
            assert response.status == 200
            etag = (await response.json())["fleet_etag"]
        if etag == self.fleet_etag:
            return None
        async with self.session.get(f"{self.url}/rules/fleet", headers=self.headers(
                **({"If-None-Match": self.fleet_etag} if self.fleet_etag else {}))) as answer:
            assert answer.status == 200, answer.status
            self.fleet_etag = answer.headers["ETag"]
            return {entry["address"]: entry for entry in (await answer.json())["entries"]}

    async def report(self, attacker: str) -> None:
        async with self.session.post(f"{self.url}/log/events", data=attack_body(attacker),
                                     headers=self.headers(**{
                                         "Content-Type": "application/x-ndjson"})) as response:
            answer = await response.json()
            assert response.status == 200 and answer["rejected"] == 0, answer


async def drill(url: str, env: dict[str, str], sql: Sql, routers: int) -> list[tuple[str, bool]]:
    checks = []
    async with aiohttp.ClientSession() as session:
        fleet = [Router(session, url, n, own_network(n)) for n in range(routers)]
        crowd = [Router(session, url, 1000 + n, f"82.1.1.{n + 1}") for n in range(20)]
        young = [Router(session, url, 2000 + n, own_network(500 + n)) for n in range(8)]
        for router in fleet + crowd + young:
            await router.enroll()
            await router.poll()
        sql.rows("UPDATE routers SET registered_at = now() - interval '10 days' "
                 "WHERE mac <> ALL(%s::macaddr[])", ([router.mac for router in young],))
        sql.rows("UPDATE router_keys SET issued_at = now() - interval '10 days' "
                 "WHERE mac <> ALL(%s::macaddr[])", ([router.mac for router in young],))
        router_backend_output(env, "allowlist", "add", D, "--note", "fleet drill: a partner")
        reporters = fleet[:REPORTERS]
        for router in reporters:
            for attacker in (A, D, fleet[10].address):
                await router.report(attacker)
        for router in crowd:
            await router.report(B)
        for router in young:
            await router.report(C)
        detail = router_backend_output(env, "fleet", "run")
        print(f"fleet job: {detail.strip()}")
        finished = time.monotonic()
        polls = await asyncio.gather(*(router.poll() for router in fleet))
        reached = time.monotonic() - finished
        got = [entries or {} for entries in polls]
        entry = got[0].get(A, {})
        checks.append((f"1. A reported by {REPORTERS} routers of {REPORTERS} networks reached "
                       f"all {routers} routers at their next poll ({reached:.2f} s after the "
                       "job)", all(A in entries for entries in got)))
        evidence = sql.rows("SELECT routers, networks, signatures FROM fleet_attackers "
                            "WHERE address = %s", (A,))
        checks.append((f"   with evidence for operators: {evidence}", bool(evidence)
                       and evidence[0][:2] == (REPORTERS, REPORTERS)
                       and set(evidence[0][2]) <= sids() and bool(entry)))
        for label, address in (("2. B, 20 routers behind one /24", B),
                               ("3. C, 8 routers younger than the set age", C),
                               ("4. D, on the fleet's allowlist", D),
                               ("5. E, a router's own poll address", fleet[10].address)):
            checks.append((f"{label}: listed for none",
                           not any(address in entries for entries in got)))
        operators_view = router_backend_output(env, "fleet", "attackers")
        checks.append(("   the operators' view names A's reporters",
                       all(router.mac in operators_view for router in reporters[:5])))
        router_backend_output(env, "allowlist", "add", A, "--note", "fleet drill: vetoed")
        await asyncio.sleep(0.5)
        vetoed = await asyncio.gather(*(router.poll() for router in fleet))
        checks.append(("6. A vetoed by the allowlist: gone at every router's next poll, "
                       "before the job's next run",
                       all(entries is not None and A not in entries for entries in vetoed)))
    return checks


def fleet_drill(location: DatabaseLocation, workdir: Path, routers: int
                ) -> list[tuple[str, bool]]:
    """The drill against the real server on `location`: each check and whether it held."""
    settings = {"ROUTER_AUTH": "key", "ENROLLMENT_TOKEN": TOKEN,
                "RULE_GENERATION_ENABLED": "false",
                "FLEET_CRON_SCHEDULE": "0 0 1 1 *"}  # the drill runs the job itself
    server = ServerRunner(location, workdir, **settings).start()
    env = {**os.environ, **database_env(location), "DATA_DIR": str(workdir),
           "DB_LOG_LEVEL": "error", **settings}
    try:
        return asyncio.run(drill(server.url, env, Sql(location), routers))
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=60)
    args = parser.parse_args()
    with throwaway_database() as (location, workdir):
        checks = fleet_drill(location, workdir, args.routers)
    for label, passed in checks:
        print(f"{'ok  ' if passed else 'FAIL'} {label}")
    passed = all(ok for _, ok in checks)
    print("PASSED" if passed else "FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
