"""Intel drill (issue 60): threat feeds served by a local HTTP server to a real server
process, against a fleet of which some routers saw listed values days earlier (postings
written through the service's own statement, then packed by `hunt compact`), some see them
now over HTTP, and some saw nothing listed; the owners' mail through a local SMTP server.

    python -m bench.intel_drill [--routers 40] [--fresh 2000] [--live-timeout 90]

Checks, each against the truth the drill planted:
- every sighting is exactly the truth (router, indicator), the packed days' included, and
  never of a value that is not delivered (private, documentation, allowlisted, held);
- each owner gets one notification per (router, indicator) and one email (the hour's limit);
  a router's new owner is told nothing of what it saw before it was theirs;
- the routers' documents carry the delivered values, and never a private, documentation,
  allowlisted or over-prevalent (held) one, nor a hostile line, in any poll: two routers
  poll every second from before the first fetch to the end;
- --fresh MACs registered now that all saw the held value and a rare listed one neither
  lift the first out of its hold nor put the second in one;
- a truncated, failing or oversized fetch keeps the previous version;
- a suppressed value leaves every router's document at the next poll;
- a listed value uploaded now is sighted by the intel-match job within a minute or so.
tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web
from aiosmtpd.controller import Controller

from server.hunt.sql import postings_statement
from server.db.location import DatabaseLocation
from server.db.pool import Database
from server.hunt.postings import POSTINGS_PER_ROUTER_DAY, Postings
from testkit.database import command_env, settings_for, throwaway_database
from testkit.server import ServerRunner, free_port, router_backend

C2 = "c2.drill-intel.example"
C2_ADDRESS = "45.33.32.91"
POPULAR = "popular.drill.example"
UNSEEN = "unseen.drill.example"
LIVE = "live.drill-intel.example"
PARTNER = "93.184.216.0/24"  # allowlisted: its address in the feed is never delivered
DOCUMENTATION = "203.0.113.50"  # a documentation address (RFC 5737): never delivered
# Never in a router's document: held (POPULAR), private, allowlisted, documentation.
NEVER_DELIVERED = {POPULAR, "10.20.30.40", "93.184.216.34", DOCUMENTATION}


def feed_document() -> bytes:
    entries = [{"ioc_value": C2, "ioc_type": "domain", "confidence_level": 90},
               {"ioc_value": f"{C2_ADDRESS}:443", "ioc_type": "ip:port"},
               {"ioc_value": UNSEEN, "ioc_type": "domain"},
               {"ioc_value": POPULAR, "ioc_type": "domain"},
               {"ioc_value": LIVE, "ioc_type": "domain"},
               {"ioc_value": "10.20.30.40:80", "ioc_type": "ip:port"},
               {"ioc_value": "93.184.216.34:8080", "ioc_type": "ip:port"},
               {"ioc_value": f"{DOCUMENTATION}:443", "ioc_type": "ip:port"},
               {"ioc_value": 'evil"; sid:1;\n.example', "ioc_type": "domain"},
               {"ioc_value": "x" * 300 + ".example", "ioc_type": "domain"}]
    return orjson.dumps({str(n): [entry] for n, entry in enumerate(entries)})


@dataclass
class Inbox:
    messages: list = field(default_factory=list)

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(list(envelope.rcpt_tos))
        return "250 OK"


@dataclass
class Feeds:
    """The feed server's answers by path: (status, body, headers)."""
    bodies: dict = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        status, body, headers = self.bodies.get(request.path, (404, b"", {}))
        if headers.get("truncate"):  # promises more than it sends, then closes
            response = web.StreamResponse(headers={"Content-Length": str(len(body) * 2)})
            await response.prepare(request)
            await response.write(body)
            request.transport.close()
            return response
        return web.Response(status=status, body=body, headers=headers)


@dataclass
class DrillResult:
    failures: list[str] = field(default_factory=list)
    sightings: int = 0
    notifications: int = 0
    emails: int = 0
    live_seconds: float | None = None
    polls: int = 0  # of the two routers polling every second

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)

    @property
    def ok(self) -> bool:
        return not self.failures


def _macs(prefix: int, count: int) -> list[str]:
    return [f"02:60:00:00:{prefix:02x}:{n:02x}" for n in range(count)]


async def plant(db: Database, macs: list[str], names: list[str], seen: datetime) -> None:
    """Postings as an upload of DNS records of `names` writes them, at `seen`, from routers
    registered then (days ago: old enough to count toward a value's prevalence; now: fresh
    MACs, which must not)."""
    for mac in macs:
        await db.execute("INSERT INTO routers (mac, registered_at) VALUES (%s, %s) "
                         "ON CONFLICT DO NOTHING", (mac, seen))
        postings = Postings()
        for name in names:
            postings.add({"event_type": "dns", "dns": {"rrname": name}})
        await db.execute(postings_statement({**postings.params(seen), "mac": mac,
                                             "budget": POSTINGS_PER_ROUTER_DAY}))


def dns_body(names: list[str], address: str | None = None) -> bytes:
    now = datetime.now(timezone.utc).isoformat()
    records = [{"timestamp": now, "event_type": "dns", "src_ip": "192.168.1.10",
                "dest_ip": address or "9.9.9.9", "dns": {"type": "query", "rrname": name}}
               for name in names]
    return b"\n".join(orjson.dumps(r) for r in records) + b"\n"


async def upload(session, base: str, mac: str, body: bytes) -> None:
    async with session.post(f"{base}/log/cfm", data=body, headers={
            "X-ID": mac, "Content-Type": "application/x-ndjson"}) as answer:
        if answer.status != 200:
            raise RuntimeError(f"upload answered {answer.status}: {await answer.text()}")


async def document(session, base: str, mac: str) -> dict:
    async with session.get(f"{base}/rules/intel", headers={"X-ID": mac}) as answer:
        return await answer.json()


def delivered(doc: dict) -> set[str]:
    names = {base64.b64decode(line).decode() for line in
             doc["files"].get("rb-intel-domains.lst", "").splitlines()}
    return names | {entry["address"] for entry in doc["block"]}


async def poll_every_second(session, base: str, macs: list[str], result: DrillResult,
                            stop: asyncio.Event) -> None:
    """The routers' documents, each polled every second until `stop`: a value that must
    never reach a router fails the drill in the poll it appears in."""
    while not stop.is_set():
        for mac in macs:
            wrong = delivered(await document(session, base, mac)) & NEVER_DELIVERED
            result.polls += 1
            result.check(not wrong, f"poll {result.polls} of {mac} delivered {sorted(wrong)}")
        try:
            await asyncio.wait_for(stop.wait(), 1)
        except TimeoutError:
            pass


def _fresh_macs(count: int) -> list[str]:
    return [f"02:61:00:{n >> 16:02x}:{(n >> 8) & 255:02x}:{n & 255:02x}" for n in range(count)]


async def intel_drill(location: DatabaseLocation, workdir: Path, routers: int = 40,
                      live_timeout: float = 90, fresh: int = 2000) -> DrillResult:
    result = DrillResult()
    early, now_seeing, quiet = _macs(1, 2), _macs(2, 2), _macs(3, max(routers - 4, 13))
    crowd = quiet[:13]  # saw the popular name: more than 30 % of the fleet
    fresh_macs = _fresh_macs(fresh)  # registered now: they saw the popular name and the C2
    heir = now_seeing[1]  # its owner replaced before the fetch: the heir is told nothing
    inbox = Inbox()
    smtp = Controller(inbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    feeds = Feeds()
    app = web.Application()
    app.router.add_get("/{tail:.*}", feeds.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    feed_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", feed_port).start()
    feed_url = f"http://127.0.0.1:{feed_port}/threatfox.json"
    server = ServerRunner(location, workdir, SMTP_HOST="127.0.0.1", SMTP_PORT=str(smtp.port),
                          SMTP_SECURITY="none", SMTP_FROM="intel@example.test",
                          INTEL_PREVALENCE_MAX="0.3", INTEL_FETCH_CRON_SCHEDULE="0 0 1 1 *",
                          NOTIFICATION_RETRY_SECONDS="1")
    env = command_env(settings_for(location, workdir))

    async def command(*args: str):
        return await asyncio.to_thread(router_backend, env, *args)

    try:
        db = await Database.open(location, 1, 2, 30)
        try:
            await plant(db, early, [f"www.{C2}"], datetime.now(timezone.utc) - timedelta(days=5))
            # Four days ago: old enough to count toward prevalence (72 h by default), and
            # within its 7 days.
            await plant(db, crowd, [POPULAR], datetime.now(timezone.utc) - timedelta(days=4))
            await plant(db, quiet, ["harmless.drill.example"],
                        datetime.now(timezone.utc) - timedelta(days=4))
            await plant(db, fresh_macs, [POPULAR, C2], datetime.now(timezone.utc))
        finally:
            await db.close()
        await asyncio.to_thread(server.start)
        async with aiohttp.ClientSession() as session:
            stop_polls = asyncio.Event()
            polls = asyncio.create_task(poll_every_second(
                session, server.url, [quiet[-1], now_seeing[0]], result, stop_polls))
            for mac in now_seeing:
                await upload(session, server.url, mac, dns_body([C2], C2_ADDRESS))
            await upload(session, server.url, now_seeing[0], dns_body(["harmless.drill.example"],
                                                                DOCUMENTATION))
            result.check((await command("hunt", "compact")).returncode == 0, "hunt compact")
            owners = {mac: f"owner-{n}" for n, mac in enumerate(early + now_seeing)}
            for mac, user in owners.items():
                done = await command("subscriptions", "owner", mac, "--user", user,
                                     "--email", f"{user}@example.org")
                result.check(done.returncode == 0, f"owner of {mac}: {done.stderr}")
            forebear, owners[heir] = owners[heir], "heir"
            done = await command("subscriptions", "owner", heir, "--user", "heir",
                                 "--email", "heir@example.org")
            result.check(done.returncode == 0, f"heir of {heir}: {done.stderr}")
            await command("allowlist", "add", PARTNER, "--note", "partner")
            feeds.bodies["/threatfox.json"] = (200, feed_document(), {})
            await command("intel", "add", "tf", feed_url, "--format", "threatfox")
            done = await command("intel", "fetch")
            result.check(done.returncode == 0, f"first fetch: {done.stdout}{done.stderr}")

            sighted = orjson.loads((await command("intel", "sightings", "--json")).stdout)
            pairs = {(s["mac"], s["indicator"]) for s in sighted["sightings"]}
            truth = {(mac, C2) for mac in early + now_seeing + fresh_macs} | {
                (mac, C2_ADDRESS) for mac in now_seeing}
            told = {pair for pair in truth if pair[0] in owners and pair[0] != heir}
            result.sightings = len(pairs)
            result.check(pairs == truth, f"sightings {sorted(pairs)} != {sorted(truth)}")

            deadline = time.monotonic() + 30
            emailed = sorted({f"{owners[mac]}@example.org" for mac, _ in told})
            while len(inbox.messages) < len(emailed) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            result.emails = len(inbox.messages)
            result.check(sorted(to for (to,) in inbox.messages) == emailed,
                         f"one email per owner told: {inbox.messages}")
            for mac, user in [*owners.items(), (heir, forebear)]:
                async with session.get(f"{server.url}/api/workflow/users/{user}/"
                                       "notifications") as answer:
                    # 404: the seed's answer for a user with no notification at all
                    total = 0 if answer.status == 404 else (await answer.json())["total"]
                result.notifications += total
                wanted = sum(1 for pair in told if pair[0] == mac)
                result.check(total == wanted, f"{user}: {total} notifications, not {wanted}")

            doc = await document(session, server.url, quiet[-1])
            values = delivered(doc)
            result.check({C2, C2_ADDRESS, UNSEEN, LIVE} <= values, f"delivered: {values}")
            result.check(not values & NEVER_DELIVERED, f"delivered what it must not: {values}")
            result.check(not any("evil" in v or len(v) > 253 for v in values), "hostile")

            for status, body, headers, why in (
                    (200, feed_document()[:40], {"truncate": "1"}, "truncated"),
                    (500, b"", {}, "failing"),
                    (200, b"[1, 2", {}, "unparsable")):
                feeds.bodies["/threatfox.json"] = (status, body, headers)
                done = await command("intel", "fetch")
                result.check(done.returncode == 1 and "kept the previous version" in
                             done.stdout, f"{why} fetch: {done.stdout}")
                result.check(delivered(await document(session, server.url, quiet[-1]))
                             == values, f"{why} fetch changed the document")

            done = await command("intel", "suppress", f"domain:{UNSEEN}", "--note", "sinkhole")
            result.check(done.returncode == 0, "suppress")
            deadline = time.monotonic() + 10
            while UNSEEN in delivered(await document(session, server.url, quiet[-1])):
                if time.monotonic() > deadline:
                    result.check(False, "the suppressed value stayed")
                    break
                await asyncio.sleep(0.2)

            started = time.monotonic()  # the intel-match job sights a new upload
            await upload(session, server.url, quiet[-1], dns_body([LIVE]))
            while time.monotonic() - started < live_timeout:
                sighted = orjson.loads((await command("intel", "sightings", "--mac",
                                                      quiet[-1], "--json")).stdout)
                if any(s["indicator"] == LIVE for s in sighted["sightings"]):
                    result.live_seconds = time.monotonic() - started
                    break
                await asyncio.sleep(2)
            result.check(result.live_seconds is not None,
                         f"the live upload was not sighted within {live_timeout:g} s")
            stop_polls.set()
            await polls
            result.check(result.polls > 0, "no poll ran")
    finally:
        await asyncio.to_thread(server.stop)
        await runner.cleanup()
        smtp.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=40)
    parser.add_argument("--fresh", type=int, default=2000)
    parser.add_argument("--live-timeout", type=float, default=90)
    args = parser.parse_args()
    with throwaway_database() as (location, workdir):
        result = asyncio.run(intel_drill(location, workdir, args.routers, args.live_timeout,
                                         args.fresh))
    print(f"sightings {result.sightings}, notifications {result.notifications}, emails "
          f"{result.emails}, polls {result.polls} none wrong, a live upload sighted after "
          f"{result.live_seconds if result.live_seconds is None else round(result.live_seconds, 1)} s")
    for failure in result.failures:
        print("FAILED:", failure)
    print("intel drill:", "PASSED" if result.ok else "FAILED")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
