"""Outage drill: stop PostgreSQL under fleet load, start it again; then stop the SMTP server
while notifications are sent, start it again.

    python -m bench.outage_drill [--down 5] [--routers 30]

The drill runs its own embedded PostgreSQL (it has to stop it) and a real SMTP server
(aiosmtpd). It passes when, while the database is away, the router API answers 503 with
Retry-After and never 500; it serves again within 5 seconds of the database returning,
without a restart; the fleet's ledger holds; and every notification sent while SMTP was away
is delivered once it is back. tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiosmtpd.controller import Controller

from bench.fleet import Fleet, check_ledger
from server.db.embedded import EmbeddedPostgres, embedded_program
from server.db.location import DatabaseLocation
from server.db.migrate import ensure_database, prepare_schema
from testkit.server import ServerRunner, free_port

PROBE_MAC = "02:00:00:00:0d:01"
RECOVERY_LIMIT_SECONDS = 5.0
STOP_WAIT_SECONDS = 120


@dataclass
class OutageResult:
    during_outage: Counter = field(default_factory=Counter)   # (path, status, retry-after?)
    recovery_seconds: float = float("inf")
    fleet_server_errors: dict = field(default_factory=dict)
    ledger_ok: bool = False
    smtp_refused: int = 0
    smtp_delivered_after: int = 0
    smtp_sent: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        router_answers = {k: n for k, n in self.during_outage.items() if k[0] != "/api"}
        only_503 = all(status in (200, 503) and (status == 200 or retry)
                       for (_, status, retry) in router_answers)
        saw_503 = any(status == 503 for (_, status, _) in router_answers)
        return (only_503 and saw_503 and self.recovery_seconds <= RECOVERY_LIMIT_SECONDS
                and not self.fleet_server_errors and self.ledger_ok
                and self.smtp_delivered_after == self.smtp_sent > 0)


class Mailbox:
    """aiosmtpd handler that keeps what it receives."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.messages.append(envelope.content)
        return "250 OK"


class StoppableDatabase:
    """An embedded PostgreSQL the drill may stop and start again (same socket directory)."""

    def __init__(self, directory: Path):
        self._embedded = EmbeddedPostgres(directory / "pgdata")
        self.location = DatabaseLocation(self._embedded.start(), 5432, "drill", "postgres", "",
                                         "disable")
        ensure_database(self.location)
        prepare_schema(self.location, partition_days=1)

    def stop(self) -> None:
        """Fast shutdown, waiting up to STOP_WAIT_SECONDS (a loaded machine can be slow);
        a server already stopped is fine; any other failure says what pg_ctl said."""
        server = self._embedded._server
        result = subprocess.run(
            [embedded_program("pg_ctl"), "-D", str(server.pgdata), "-w", "-t",
             str(STOP_WAIT_SECONDS), "-m", "fast", "stop"],
            user=server.system_user, capture_output=True, text=True)
        if result.returncode != 0 and (Path(server.pgdata) / "postmaster.pid").exists():
            raise RuntimeError(f"pg_ctl stop failed ({result.returncode}): "
                               f"{(result.stderr or result.stdout).strip()}")

    def start(self) -> None:
        self._embedded._server.ensure_postgres_running()

    def close(self) -> None:
        self._embedded.stop()


UPLOAD = ("POST", "/log/events", b'{"event_type": "alert"}\n')
POLL = ("GET", "/rules/last_updated", None)
PROBE_CALLS = (POLL, ("GET", "/rules/ids", None), UPLOAD, ("GET", "/health", None))


async def probe(session: aiohttp.ClientSession, url: str, mac: str = PROBE_MAC,
                calls: tuple = PROBE_CALLS) -> list[tuple[str, int, bool]]:
    """One round of `calls` (by default those a router and a backend make) as router `mac`;
    (path, status, has Retry-After) each."""
    answers = []
    for method, path, body in calls:
        headers = {"X-ID": mac, "Content-Type": "application/x-ndjson"}
        async with session.request(method, url + path, data=body, headers=headers) as response:
            await response.read()
            answers.append((path, response.status, "Retry-After" in response.headers))
    return answers


async def database_outage(db: StoppableDatabase, server: ServerRunner, result: OutageResult,
                          routers: int, down_seconds: float) -> None:
    fleet = Fleet([server.url], routers, pause_seconds=0.3, request_timeout=10)
    running = asyncio.create_task(fleet.run(seconds=3600))
    async with aiohttp.ClientSession() as session:
        await asyncio.sleep(2)
        await asyncio.to_thread(db.stop)
        deadline = time.monotonic() + down_seconds
        while time.monotonic() < deadline:
            for answer in await probe(session, server.url):
                result.during_outage[answer] += 1
            async with session.get(server.url + "/api/workflow/users/u/notifications") as r:
                result.during_outage[("/api", r.status, False)] += 1
            await asyncio.sleep(0.1)
        await asyncio.to_thread(db.start)
        back = time.monotonic()
        while time.monotonic() - back < 30:
            statuses = [status for _, status, _ in await probe(session, server.url)]
            if all(status in (200, 404) for status in statuses):
                result.recovery_seconds = time.monotonic() - back
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(2)
    fleet.stop()
    ledger = await running
    result.fleet_server_errors = ledger.server_errors()
    check = check_ledger(db.location, ledger)
    result.ledger_ok = check.ok
    result.notes.append(f"fleet: {ledger.records_acknowledged} records acknowledged, "
                        f"{sum(n for (_, s), n in ledger.statuses.items() if s == 503)} "
                        f"answers 503, ledger {'OK' if check.ok else check}")


async def smtp_outage(server: ServerRunner, smtp_port: int, result: OutageResult,
                      sends: int) -> None:
    mailbox = Mailbox()
    body = {"userId": "drill", "recipient": "ops@example.org", "projectId": "p1"}
    async with aiohttp.ClientSession() as session:
        for n in range(sends):
            async with session.post(server.url + "/api/notifications/scan-failed",
                                    json={**body, "projectId": f"p{n}"}) as response:
                await response.read()
                result.smtp_refused += response.status == 500
                result.smtp_sent += 1
        controller = Controller(mailbox, hostname="127.0.0.1", port=smtp_port)
        controller.start()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(mailbox.messages) < sends:
                await asyncio.sleep(0.2)
        finally:
            controller.stop()
    result.smtp_delivered_after = len(mailbox.messages)


async def outage_drill(directory: Path, routers: int = 30, down_seconds: float = 5,
                       sends: int = 5) -> OutageResult:
    result = OutageResult()
    db = await asyncio.to_thread(StoppableDatabase, directory)
    smtp_port = free_port()  # nothing listens there until the SMTP phase starts one
    server = ServerRunner(db.location, directory, RULE_GENERATION_ENABLED="false",
                          SMTP_HOST="127.0.0.1", SMTP_PORT=str(smtp_port),
                          SMTP_SECURITY="none", NOTIFICATION_RETRY_SECONDS="1",
                          DB_TIMEOUT_SECONDS="3")
    await asyncio.to_thread(server.start)
    try:
        await database_outage(db, server, result, routers, down_seconds)
        await smtp_outage(server, smtp_port, result, sends)
    finally:
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(db.close)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--down", type=float, default=5, help="seconds the database is away")
    parser.add_argument("--routers", type=int, default=30)
    parser.add_argument("--sends", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(outage_drill(Path(directory), args.routers, args.down,
                                          args.sends))
    answers = ", ".join(f"{path} {status}{' +Retry-After' if retry else ''}: {n}"
                        for (path, status, retry), n in sorted(result.during_outage.items()))
    print(f"database away {args.down}s; answers meanwhile: {answers}")
    print(f"served again {result.recovery_seconds:.2f}s after the database returned "
          f"(limit {RECOVERY_LIMIT_SECONDS}s)")
    print(*result.notes, sep="\n")
    print(f"SMTP away: {result.smtp_sent} notifications sent, {result.smtp_refused} answered "
          f"500 (stored, retried), {result.smtp_delivered_after} delivered once SMTP returned")
    print("outage drill:", "PASSED" if result.ok else "FAILED")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
