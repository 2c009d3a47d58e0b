"""Weekly report drill (issue 83): a fleet of ROUTERS routers of ROUTERS/2 owners talks to a
real server process over HTTP for a week's worth of truth (alerts of known sources,
signatures and severities, polls or none, a listed domain looked up, rules reported loaded
current, behind or failed, packets its firewall dropped in an enforcement report); then the week's reports are made by the command, as the hourly
job makes them, and the owners' mail arrives at a local SMTP server. Then time moves on a
week and the next reports are made.

    python -m bench.report_drill [--routers 1000]

Checks, each against the truth the drill planted:
- each owner gets exactly one email a week, those whose routers saw nothing included (the
  report says all was quiet), and a rerun sends none;
- every figure of every report (alerts by severity, the address and signature most alerted,
  sightings, rules, gone quiet, blocked by the firewall) is the planted one, and the owner's feed holds that report;
- the week after, every router's figures are its own of that week: no alert, and gone
  quiet (no contact in its last day).
tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from email.parser import BytesParser
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web
from aiosmtpd.controller import Controller

from bench.checks import Checks
from bench.intel_drill import Feeds
from server.db.location import DatabaseLocation
from server.db.pool import Database
from testkit.database import command_env, settings_for, throwaway_database
from testkit.server import ServerRunner, free_port, router_backend

LISTED = "c2.report-drill.example"
RULES = ("current", "behind", "failed", None)  # None: never reported (and none generated)
CONCURRENCY = 6  # under the uploads in progress one client address may hold (8)


@dataclass(frozen=True)
class Plan:
    """What one router does in the week, and so what its report must say."""
    mac: str
    owner: str
    alerts: int          # alerts uploaded, all of one source, signature and severity
    severity: int
    polls: bool
    looks_up: bool       # the listed domain: one sighting
    rules: str | None
    blocked: int         # packets its firewall's fleet list dropped (an enforcement report)

    @property
    def source(self) -> str:
        return f"45.{int(self.mac[-5:-3], 16)}.{int(self.mac[-2:], 16)}.1"

    @property
    def sid(self) -> int:
        return 2_000_000 + int(self.mac[-2:], 16) % 7


def plans(routers: int) -> list[Plan]:
    """Owner k has routers 2k and 2k+1; every fifth owner's routers see nothing at all but
    poll (all quiet), every seventh router never polls (gone quiet)."""
    found = []
    for n in range(routers):
        owner = n // 2
        calm = owner % 5 == 2
        found.append(Plan(f"02:83:00:00:{n >> 8:02x}:{n & 255:02x}", f"owner-{owner}",
                          0 if calm else n % 9, 1 + n % 3, calm or n % 7 != 3,
                          not calm and n % 11 == 4, None if calm else RULES[n % 4],
                          0 if calm or n % 7 == 3 else n % 13))
    return found


@dataclass
class DrillResult(Checks):
    owners: int = 0
    emails_first: int = 0
    emails_second: int = 0
    figures_checked: int = 0
    seconds: dict = field(default_factory=dict)


def _alerts(plan: Plan) -> bytes:
    return b"\n".join(orjson.dumps({
        "timestamp": "2026-12-01T10:00:00+00:00", "event_type": "alert", "flow_id": n,
        "src_ip": plan.source, "src_port": 40000 + n, "dest_ip": "192.168.1.20",
        "dest_port": 22, "proto": "TCP",
        "alert": {"signature_id": plan.sid, "severity": plan.severity}})
        for n in range(plan.alerts))


async def _act(session: aiohttp.ClientSession, url: str, plan: Plan) -> None:
    headers = {"X-ID": plan.mac, "Content-Type": "application/x-ndjson"}
    if plan.polls:
        async with session.get(f"{url}/rules/last_updated", headers=headers) as answer:
            assert answer.status == 200, await answer.text()
    if plan.alerts:
        async with session.post(f"{url}/log/events", data=_alerts(plan),
                                headers=headers) as answer:
            assert answer.status == 200, await answer.text()
    if plan.blocked:
        body = {"lists": {"fleet": {"packets": plan.blocked, "bytes": 60 * plan.blocked}}}
        async with session.post(f"{url}/rules/enforced", json=body,
                                headers={"X-ID": plan.mac}) as answer:
            assert answer.status == 200, await answer.text()
    if plan.looks_up:
        body = orjson.dumps({"event_type": "dns", "src_ip": "192.168.1.20",
                             "dest_ip": "192.0.2.53",
                             "dns": {"type": "query", "rrname": LISTED, "rrtype": "A"}})
        async with session.post(f"{url}/log/cfm", data=body, headers=headers) as answer:
            assert answer.status == 200, await answer.text()


async def _report_loading(session, url: str, plan: Plan) -> None:
    """The router says what it loaded (POST /rules/applied), against the payloads' ETags
    the drill stored for it."""
    current = plan.rules == "current"
    body = {"ids_etag": f'"ids-{plan.mac}"' if current else '"ids-older"',
            "firewall_etag": f'"fw-{plan.mac}"', "ok": plan.rules != "failed"}
    async with session.post(f"{url}/rules/applied", json=body,
                            headers={"X-ID": plan.mac}) as answer:
        assert answer.status == 200, await answer.text()


async def _everyone(work, plans_: list[Plan]) -> None:
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(plan: Plan) -> None:
        async with limit:
            await work(plan)
    await asyncio.gather(*(one(plan) for plan in plans_))


async def _pending(location: DatabaseLocation) -> int:
    db = await Database.open(location, 0, 1, 30)
    try:
        (count,) = await db.fetchrow("SELECT count(*) FROM hunt_pending")
        return count
    finally:
        await db.close()


@dataclass
class ReportInbox:
    """The recipients of each weekly report emailed (other mail, the sightings', counted)."""
    reports: list = field(default_factory=list)
    others: int = 0

    async def handle_DATA(self, server, session, envelope):
        subject = BytesParser().parsebytes(envelope.content, headersonly=True)["Subject"]
        if subject.startswith("Your week:"):
            self.reports.append(tuple(envelope.rcpt_tos))
        else:
            self.others += 1
        return "250 OK"


async def _mail(inbox: ReportInbox, count: int, timeout: float) -> None:
    """Until `count` reports have arrived (the retry loop sends each within a second or so)."""
    deadline = time.monotonic() + timeout
    while len(inbox.reports) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.2)


def _check_first_week(result: DrillResult, reports: dict[str, dict],
                      by_owner: dict[str, list[Plan]]) -> None:
    for owner, theirs in by_owner.items():
        report = reports.get(owner)
        result.check(report is not None, f"{owner}: no report")
        if report is None:
            continue
        weeks = {week["mac"]: week for week in report["routers"]}
        quiet_owner = all(plan.alerts == 0 and not plan.looks_up for plan in theirs)
        result.check(report["all_quiet"] == quiet_owner, f"{owner}: all_quiet")
        result.check(report["totals"]["alerts"] == sum(p.alerts for p in theirs),
                     f"{owner}: total alerts")
        for plan in theirs:
            week = weeks[plan.mac]
            severity = {1: "high", 2: "medium", 3: "low"}[plan.severity]
            result.check(week["alerts"]["total"] == plan.alerts
                         and week["alerts"][severity] == plan.alerts, f"{plan.mac}: alerts")
            if plan.alerts:
                result.check(week["top_remote"] == [{"address": plan.source,
                                                     "alerts": plan.alerts}],
                             f"{plan.mac}: remote {week['top_remote']}")
                result.check([s["sid"] for s in week["top_signatures"]] == [plan.sid],
                             f"{plan.mac}: signatures")
            result.check(week["sightings"]["count"] == int(plan.looks_up),
                         f"{plan.mac}: sightings {week['sightings']['count']}")
            result.check(week["rules"]["state"] == (plan.rules or "none"),
                         f"{plan.mac}: rules {week['rules']['state']} not {plan.rules}")
            result.check(week["quiet"] == (not plan.polls), f"{plan.mac}: quiet")
            result.check(week["blocked"] == ({"packets": plan.blocked, "bytes": 60 * plan.blocked,
                                              "firewall": 0, "fleet": plan.blocked, "intel": 0}
                                             if plan.blocked else None),
                         f"{plan.mac}: blocked {week['blocked']}")
            result.figures_checked += 1


async def report_drill(location: DatabaseLocation, workdir: Path,
                       routers: int = 1000) -> DrillResult:
    result = DrillResult()
    fleet = plans(routers)
    by_owner: dict[str, list[Plan]] = {}
    for plan in fleet:
        by_owner.setdefault(plan.owner, []).append(plan)
    result.owners = len(by_owner)
    inbox = ReportInbox()
    smtp = Controller(inbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    feeds = Feeds()
    feeds.bodies["/listed.txt"] = (200, f"{LISTED}\n".encode(), {})
    app = web.Application()
    app.router.add_get("/{tail:.*}", feeds.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    feed_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", feed_port).start()
    server = ServerRunner(location, workdir, SMTP_HOST="127.0.0.1", SMTP_PORT=str(smtp.port),
                          SMTP_SECURITY="none", SMTP_FROM="reports@example.test",
                          NOTIFICATION_RETRY_SECONDS="1", WEEKLY_REPORTS_CRON_SCHEDULE="off",
                          INTEL_FETCH_CRON_SCHEDULE="0 0 1 1 *")
    env = command_env(settings_for(location, workdir))

    async def command(*args: str):
        return await asyncio.to_thread(router_backend, env, *args)

    try:
        await asyncio.to_thread(server.start)
        began = time.monotonic()
        async with aiohttp.ClientSession() as session:
            db = await Database.open(location, 1, 2, 60)
            try:  # subscribed with their owners, as `subscriptions add --user` does
                await db.execute(
                    "INSERT INTO routers (mac, owner_user, owner_email) SELECT m, o, "
                    "o || '@example.org' FROM unnest(%s::macaddr[], %s::text[]) AS f(m, o)",
                    ([plan.mac for plan in fleet], [plan.owner for plan in fleet]))
                # theirs since two days: today's enforcement reports are of their ownership
                await db.execute("UPDATE routers SET registered_at = now() - interval '2 days'")
                await _everyone(lambda plan: _act(session, server.url, plan), fleet)
                reporting = [plan for plan in fleet if plan.rules is not None]
                await db.execute(
                    "INSERT INTO router_rules (mac, ids_etag, firewall_etag) SELECT m::macaddr, "
                    "'ids-' || m, 'fw-' || m FROM unnest(%s::text[]) m",
                    ([plan.mac for plan in reporting],))
                await _everyone(lambda plan: _report_loading(session, server.url, plan),
                                reporting)
            finally:
                await db.close()
        result.seconds["fleet's week"] = time.monotonic() - began
        # The fetch's retro-hunt reads the hunt index: the uploads indexed first (the
        # indexer's loop reads them within HUNT_INDEX_SECONDS).
        began = time.monotonic()
        while await _pending(location) and time.monotonic() - began < 120:
            await asyncio.sleep(0.2)
        done = await command("intel", "add", "listed",
                             f"http://127.0.0.1:{feed_port}/listed.txt", "--format", "plain")
        result.check(done.returncode == 0, f"intel add: {done.stderr}")
        done = await command("intel", "fetch")
        result.check(done.returncode == 0, f"intel fetch: {done.stderr}")
        result.seconds["indexed, fetched and retro-hunted"] = time.monotonic() - began

        end = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(
            minute=0, second=0, microsecond=0)
        for week, label in ((end, "first"), (end + timedelta(days=7), "second")):
            began = time.monotonic()
            done = await command("reports", "weekly", "--week-ending", week.isoformat())
            result.check(done.returncode == 0, f"reports weekly: {done.stderr}")
            result.seconds[f"{label} week's reports"] = time.monotonic() - began
            again = await command("reports", "weekly", "--week-ending", week.isoformat())
            result.check("0 weekly reports made" in again.stdout, f"rerun: {again.stdout}")
            wanted = result.owners * (1 if label == "first" else 2)
            await _mail(inbox, wanted, timeout=120)
            setattr(result, f"emails_{label}", len(inbox.reports))
        recipients = inbox.reports
        result.check(len(recipients) == 2 * result.owners
                     and len(set(recipients)) == result.owners
                     and all(recipients.count(to) == 2 for to in set(recipients)),
                     f"{len(recipients)} emails to {len(set(recipients))} owners")
        db = await Database.open(location, 1, 2, 60)
        try:
            rows = await db.fetchall(
                "SELECT user_id, metadata FROM notifications WHERE type = 'weekly_report' "
                "ORDER BY created_at")
            (unsent,) = await db.fetchrow("SELECT count(*) FROM notifications WHERE "
                                          "type = 'weekly_report' AND status <> 'sent'")
            result.check(len(rows) == 2 * result.owners and unsent == 0,
                         f"{len(rows)} reports in the feeds, {unsent} not sent")
        finally:
            await db.close()
        first: dict[str, dict] = {}
        second: dict[str, dict] = {}
        for user, metadata in rows:
            (second if user in first else first)[user] = metadata
        _check_first_week(result, first, by_owner)
        for owner, report in second.items():
            result.check(report["totals"]["alerts"] == 0
                         and report["totals"]["blocked_packets"] == 0
                         and report["totals"]["quiet_routers"] == len(by_owner[owner]),
                         f"{owner}: the second week {report['totals']}")
    finally:
        await asyncio.to_thread(server.stop)
        await runner.cleanup()
        smtp.stop()
    return result


def report(result: DrillResult) -> None:
    print(f"{result.owners} owners: {result.emails_first} emails after the first week, "
          f"{result.emails_second} after the second; {result.figures_checked} routers' "
          f"figures checked against the truth")
    for label, seconds in result.seconds.items():
        print(f"  {label}: {seconds:.1f} s")
    print("every check held" if result.ok else "FAILED:\n  " + "\n  ".join(result.failures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routers", type=int, default=1000)
    args = parser.parse_args()
    with throwaway_database() as (location, workdir):
        result = asyncio.run(report_drill(location, workdir, args.routers))
    report(result)
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
