"""Fault drill: the database fails in three ways, again and again, under a working service.

    python -m bench.fault_drill [--routers 300] [--rounds 3] [--interval 5]

The drill owns an embedded PostgreSQL and puts a TCP proxy (testkit/tcp_proxy.py) between it
and the service, which runs under its supervisor at its default settings except: every
router regenerated every --interval seconds, the fixture ruleset, SMTP to the drill's own
server. While a fleet (bench/fleet.py) uploads and polls, notifications are sent through
the API and the routers are regenerated, each round:

- terminate: every connection of the service is terminated (pg_terminate_backend), every
  0.2 s for --terminate-seconds;
- restart: PostgreSQL is stopped (fast) and started again;
- cut: the network between service and database is cut (nothing passes, nothing closes)
  for --cut-seconds, longer than DB_TIMEOUT_SECONDS.

After the first round a fleet-wide rule override changes every router's payloads. After the
last, the drill checks: every router generated again after the last fault with no failure
left; no claim longer than its lease; every acknowledged record stored exactly once (the
fleet's ledger); every acknowledged notification stored once and all stored ones delivered;
no 304 for an ETag that is no longer current, neither after the last fault nor, all along
the drill outside the faults, 2 s after the database replaced it (stale_probe.py); /health
200. It prints the figures, with the time the service took to answer again after each fault
and the warnings each background loop logged. tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import email
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiosmtpd.controller import Controller

from bench.fleet import Fleet, check_ledger, summary
from bench.outage_drill import Mailbox, StoppableDatabase
from bench.stale_probe import GRACE_SECONDS, StaleProbe, StaleProbeResult
from server.db.location import DatabaseLocation
from server.generation.service import CLAIM_LEASE
from testkit import REPOSITORY
from testkit.database import Sql, database_env
from testkit.rule_archives import fixture_members, make_zip
from testkit.server import ServerRunner, free_port
from testkit.tcp_proxy import TcpProxy

PROBE_MAC = "02:00:00:00:fd:01"
OVERRIDE_SID = "9000001"      # in the fixture ruleset, so every payload changes without it
RECOVERY_LIMIT_SECONDS = 60.0
LOOP_WARNING = re.compile(r"WARNING router_backend\.\w+: ([\w:-]+): .*retrying quietly")
# The last line of a logged traceback: the exception and its message.
EXCEPTION_LINE = re.compile(r"^([a-z_.]*[A-Z]\w*(?:Error|Exception|Shutdown|Lost)\b.*)$",
                            re.MULTILINE)


@dataclass
class FaultDrillResult:
    recovery: dict[str, list[float]] = field(default_factory=dict)  # fault -> seconds
    terminated: int = 0
    routers: int = 0
    regenerated: int = 0
    still_failing: int = 0
    long_claims: int = 0
    ledger_ok: bool = False
    ledger_summary: str = ""
    server_errors: dict = field(default_factory=dict)
    notifications_acknowledged: int = 0
    notifications_duplicated: int = 0
    notifications_missing: int = 0
    notifications_undelivered: int = 0
    deliveries_repeated: int = 0
    etags_checked: int = 0
    etags_changed: int = 0
    stale_304: int = 0
    probe: StaleProbeResult = field(default_factory=StaleProbeResult)
    health: int = 0
    loop_warnings: Counter = field(default_factory=Counter)
    exceptions_logged: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        recovered = all(seconds <= RECOVERY_LIMIT_SECONDS
                        for times in self.recovery.values() for seconds in times)
        return (recovered and self.regenerated == self.routers > 0 and not self.still_failing
                and not self.long_claims and self.ledger_ok and not self.server_errors
                and self.notifications_acknowledged > 0 and not self.notifications_duplicated
                and not self.notifications_missing and not self.notifications_undelivered
                and self.etags_changed > 0 and not self.stale_304
                and self.probe.probes > 0 and not self.probe.stale and self.health == 200)


class Notifications:
    """Sends scan-failed notifications with an Idempotency-Key each, again with the same key
    until one is answered 2xx, and remembers which were acknowledged."""

    def __init__(self, url: str):
        self._url = url + "/api/notifications/scan-failed"
        self.acknowledged: set[str] = set()
        self.tried: set[str] = set()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, pause: float = 0.25) -> None:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            number = 0
            while not self._stop.is_set():
                number += 1
                project = f"drill-{number}"
                self.tried.add(project)
                for _ in range(20):
                    if await self._send(session, project) or self._stop.is_set():
                        break
                    await asyncio.sleep(1)
                await asyncio.sleep(pause)

    async def _send(self, session: aiohttp.ClientSession, project: str) -> bool:
        body = {"userId": "drill", "recipient": "ops@example.org", "projectId": project}
        try:
            async with session.post(self._url, json=body,
                                    headers={"Idempotency-Key": project}) as response:
                await response.read()
                if 200 <= response.status < 300:
                    self.acknowledged.add(project)
                    return True
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            pass
        return False


async def answers_again(session: aiohttp.ClientSession, url: str, since: float) -> float:
    """Seconds from `since` until a router's poll is answered 200 again."""
    while time.monotonic() - since < RECOVERY_LIMIT_SECONDS * 2:
        try:
            async with session.get(url + "/rules/last_updated",
                                   headers={"X-ID": PROBE_MAC}) as response:
                if response.status == 200:
                    return time.monotonic() - since
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            pass
        await asyncio.sleep(0.1)
    return float("inf")


async def terminate_connections(location: DatabaseLocation, seconds: float) -> int:
    terminated = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rows = await asyncio.to_thread(
            Sql(location).rows, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()", (location.name,))
        terminated += rows[0][0]
        await asyncio.sleep(0.2)
    return terminated


async def restart_database(db: StoppableDatabase) -> None:
    await asyncio.to_thread(db.stop)
    await asyncio.sleep(1)
    await asyncio.to_thread(db.start)


async def cut_network(proxy: TcpProxy, seconds: float) -> None:
    proxy.cut()
    await asyncio.sleep(seconds)
    proxy.restore()


def disable_rule_fleet_wide(location: DatabaseLocation, workdir: Path) -> None:
    """The operator's command, straight to the database: every payload changes."""
    env = {**os.environ, **database_env(location), "DATA_DIR": str(workdir),
           "RULE_DATA_DIR": str(workdir / "rules")}
    result = subprocess.run([sys.executable, "-m", "ops.cli", "rules", "disable", OVERRIDE_SID,
                             "--note", "fault drill"], env=env, capture_output=True, text=True,
                            timeout=120, cwd=REPOSITORY)
    if result.returncode != 0:
        raise RuntimeError(f"rules disable failed: {result.stderr}")


async def wait_regenerated(location: DatabaseLocation, since_epoch: float, routers: int,
                           timeout: float) -> int:
    """Routers generated after `since_epoch` and not failing, once all are (or time is up)."""
    deadline = time.monotonic() + timeout
    statement = ("SELECT count(*) FROM generation_queue WHERE generated_at > to_timestamp(%s) "
                 "AND attempts = 0 AND mac <> %s")
    while True:
        done = (await asyncio.to_thread(Sql(location).rows, statement,
                                        (since_epoch, PROBE_MAC)))[0][0]
        if done >= routers or time.monotonic() > deadline:
            return done
        await asyncio.sleep(1)


async def check_etags(url: str, location: DatabaseLocation, first: dict[str, str],
                      result: FaultDrillResult) -> None:
    """Poll every router with the ETag it had before the override: 304 only when it is
    still the current one."""
    current = dict(await asyncio.to_thread(
        Sql(location).rows, "SELECT mac::text, ids_etag FROM router_rules"))
    async with aiohttp.ClientSession() as session:
        for mac, etag in first.items():
            async with session.get(url + "/rules/ids", headers={
                    "X-ID": mac, "If-None-Match": etag}) as response:
                await response.read()
                changed = f'W/"{current.get(mac)}"' != etag and f'"{current.get(mac)}"' != etag
                result.etags_checked += 1
                result.etags_changed += changed
                result.stale_304 += changed and response.status == 304


def check_notifications(location: DatabaseLocation, sender: Notifications, mailbox: Mailbox,
                        result: FaultDrillResult) -> None:
    titles = Sql(location).rows("SELECT title FROM notifications WHERE user_id = 'drill'")
    stored = Counter(title.removeprefix("Scan failed for project ") for (title,) in titles)
    delivered = Counter(email.message_from_bytes(message)["Subject"].removeprefix(
        "Scan failed for project ") for message in mailbox.messages)
    result.notifications_acknowledged = len(sender.acknowledged)
    result.notifications_duplicated = sum(1 for n in stored.values() if n > 1)
    result.notifications_missing = sum(1 for p in sender.acknowledged if p not in stored)
    result.notifications_undelivered = sum(1 for p in stored if p not in delivered)
    result.deliveries_repeated = sum(n - 1 for n in delivered.values() if n > 1)


async def fault_drill(directory: Path, routers: int = 300, rounds: int = 3,
                      interval: int = 5, terminate_seconds: float = 5,
                      cut_seconds: float = 35, db_timeout: int | None = None,
                      settle_seconds: float = 5) -> FaultDrillResult:
    result = FaultDrillResult(routers=routers)
    started = time.monotonic()
    db = await asyncio.to_thread(StoppableDatabase, directory)
    proxy = await TcpProxy(db.location.host, db.location.port).start()
    via_proxy = proxy.location(db.location)
    archive = directory / "archive.zip"
    archive.write_bytes(make_zip(fixture_members()))
    (directory / "version.txt").write_text("fault-drill")
    mailbox = Mailbox()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    settings = {"HTTP_WORKERS": "2", "RULE_GENERATION_INTERVAL_SECONDS": str(interval),
                "RULE_PREPROCESS_AT_START": "true", "RULE_DATA_DIR": str(directory / "rules"),
                "RULE_PREPROCESS_ARCHIVE_URL": archive.as_uri(),
                "RULE_PREPROCESS_VERSION_URL": (directory / "version.txt").as_uri(),
                "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(smtp.port), "SMTP_SECURITY": "none",
                "NOTIFICATION_RETRY_SECONDS": "1"}
    if db_timeout is not None:
        settings["DB_TIMEOUT_SECONDS"] = str(db_timeout)
    server = ServerRunner(via_proxy, directory, **settings)
    try:
        await asyncio.to_thread(server.start)
        fleet = Fleet([server.url], routers, pause_seconds=2.0, request_timeout=60)
        sender = Notifications(server.url)
        probe = StaleProbe(server.url, db.location)
        running = [asyncio.create_task(fleet.run(seconds=24 * 3600)),
                   asyncio.create_task(sender.run()), asyncio.create_task(probe.run())]
        try:
            await wait_regenerated(db.location, 0, routers, timeout=300)
            await asyncio.sleep(5)  # every router polls its first payloads
            first_etags = {router.mac: router.etags["/rules/ids"] for router in fleet.routers
                           if "/rules/ids" in router.etags}
            faults = {"terminate": lambda: terminate_connections(db.location, terminate_seconds),
                      "restart": lambda: restart_database(db),
                      "cut": lambda: cut_network(proxy, cut_seconds)}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
                for number in range(rounds):
                    for name, fault in faults.items():
                        probe.fault_started()
                        outcome = await fault()
                        if name == "terminate":
                            result.terminated += outcome
                        result.recovery.setdefault(name, []).append(
                            await answers_again(session, server.url, time.monotonic()))
                        probe.fault_ended()
                        await asyncio.sleep(settle_seconds)
                    if number == 0:
                        await asyncio.to_thread(disable_rule_fleet_wide, db.location, directory)
            last_fault = time.time()
            result.regenerated = await wait_regenerated(db.location, last_fault, routers,
                                                        timeout=max(120, 3 * interval))
            await asyncio.sleep(2)  # the last notifications go out, retries included
        finally:
            fleet.stop()
            sender.stop()
            probe.stop()
            ledger, _, result.probe = await asyncio.gather(*running)
        result.still_failing = (await asyncio.to_thread(
            Sql(db.location).value,
            "SELECT count(*) FROM generation_queue WHERE attempts > 0"))
        # clock_timestamp(), read after the snapshot: now() is when the statement began, and
        # a claim committed between then and the snapshot ends up to a lease after that.
        result.long_claims = (await asyncio.to_thread(
            Sql(db.location).value, "SELECT count(*) FROM generation_queue "
            "WHERE claimed_until > clock_timestamp() + %s", (CLAIM_LEASE,)))
        check = check_ledger(db.location, ledger)
        result.ledger_ok = check.ok
        result.server_errors = ledger.server_errors()
        result.ledger_summary = summary(ledger, check, time.monotonic() - started)
        await check_etags(server.url, db.location, first_etags, result)
        await wait_delivered(db.location, sender, mailbox)
        check_notifications(db.location, sender, mailbox, result)
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + "/health",
                                   headers={"X-ID": PROBE_MAC}) as response:
                result.health = response.status
        log_text = server.log_path.read_text(errors="replace")
        result.loop_warnings = Counter(LOOP_WARNING.findall(log_text))
        result.exceptions_logged = Counter(line[:160] for line in EXCEPTION_LINE.findall(log_text))
    finally:
        await asyncio.to_thread(server.stop)
        smtp.stop()
        await proxy.close()
        await asyncio.to_thread(db.close)
    result.seconds = time.monotonic() - started
    return result


async def wait_delivered(location: DatabaseLocation, sender: Notifications, mailbox: Mailbox,
                         timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = (await asyncio.to_thread(
            Sql(location).value, "SELECT count(*) FROM notifications WHERE user_id = 'drill' "
            "AND status <> 'sent'"))
        if not pending:
            return
        await asyncio.sleep(0.5)


def report(result: FaultDrillResult) -> str:
    recovery = "; ".join(f"{name} x{len(times)}: answered again in "
                         f"{min(times):.1f}-{max(times):.1f}s"
                         for name, times in result.recovery.items())
    warnings = ", ".join(f"{loop} {n}" for loop, n in sorted(result.loop_warnings.items()))
    return "\n".join([
        f"faults: {recovery} ({result.terminated} connections terminated)",
        f"routers: {result.regenerated}/{result.routers} generated again after the last "
        f"fault, {result.still_failing} still failing, {result.long_claims} claims longer "
        f"than the {CLAIM_LEASE.total_seconds():.0f}s lease",
        result.ledger_summary,
        f"notifications: {result.notifications_acknowledged} acknowledged, "
        f"{result.notifications_duplicated} stored twice, {result.notifications_missing} "
        f"missing, {result.notifications_undelivered} not delivered, "
        f"{result.deliveries_repeated} delivered more than once (SMTP is at least once)",
        f"ETags: {result.etags_checked} polled with the ETag from before the override, "
        f"{result.etags_changed} changed since, {result.stale_304} answered 304 anyway; "
        f"all along, {result.probe.probes} polls with an ETag replaced at least "
        f"{GRACE_SECONDS:.0f}s before "
        f"(outside the faults), {result.probe.stale} answered 304",
        *result.probe.examples[:5],
        f"health {result.health}; warnings logged per background loop (one per outage): "
        f"{warnings or 'none'}; {result.seconds:.0f}s in all",
        *(f"logged {n}x: {line}" for line, n in result.exceptions_logged.most_common(5))])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=int, default=5,
                        help="RULE_GENERATION_INTERVAL_SECONDS")
    parser.add_argument("--terminate-seconds", type=float, default=5)
    parser.add_argument("--cut-seconds", type=float, default=35,
                        help="longer than DB_TIMEOUT_SECONDS (default 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(fault_drill(Path(directory), args.routers, args.rounds,
                                         args.interval, args.terminate_seconds,
                                         args.cut_seconds))
    print(report(result))
    print("fault drill:", "PASSED" if result.ok else "FAILED")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
