"""Worker-kill drill: SIGKILL one HTTP worker of the supervisor at random moments under fleet
load, and check the fleet's ledger against the database.

    python -m bench.worker_kill_drill [--kills 10] [--workers 2] [--routers 50] [--seed 1]

The service runs with --workers HTTP workers (HTTP_WORKERS) under its supervisor. Each round,
1 to 3 s after the last, kills one worker chosen at random and waits until the supervisor has
put a new one in its place (listening). At that pace no worker dies more than the supervisor's
burst (5 in 10 s), so every replacement is immediate. Passes when every acknowledged record is
stored exactly once, no request is half stored, no refused request stored anything, no answer
was a 5xx, the supervisor itself never restarted, the fleet was answered after the last kill,
and no more requests failed than the killed workers held connections when they died (a
connection the killed worker held ends without an answer; one still waiting to be accepted
must not: the supervisor's socket keeps it for the replacement).
tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.fleet import Fleet, Ledger, LedgerCheck, check_ledger, summary
from server.db.location import DatabaseLocation
from testkit.database import throwaway_database
from testkit.server import ServerRunner

REPLACE_TIMEOUT = 30.0


@dataclass
class DrillResult:
    ledger: Ledger
    check: LedgerCheck
    kills: int
    replaced_in: list[float]       # seconds from each kill until its replacement listened
    connections_held: int          # by the killed workers when they died, all kills
    supervisor_survived: bool
    answered_after_last_kill: int
    seconds: float

    @property
    def ok(self) -> bool:
        return (self.check.ok and not self.ledger.server_errors() and self.supervisor_survived
                and self.answered_after_last_kill > 0 and len(self.replaced_in) == self.kills
                and self.ledger.connection_errors <= self.connections_held)


async def replace_worker(server: ServerRunner, victim: int, workers: int) -> float:
    """Seconds until the supervisor runs `workers` HTTP workers again, none of them `victim`,
    and the new one listens (it logs `serving on ... (pid N)`)."""
    started, log_from = time.monotonic(), server.log_path.stat().st_size
    before = set(server.children("serving"))
    while time.monotonic() - started < REPLACE_TIMEOUT:
        pids = set(server.children("serving"))
        new = pids - before
        if len(pids) == workers and victim not in pids and new and all(
                f":{server.port} (pid {pid})" in read_from(server.log_path, log_from)
                for pid in new):
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise TimeoutError(f"worker {victim} not replaced within {REPLACE_TIMEOUT}s")


def read_from(path: Path, offset: int) -> str:
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


async def worker_kill_drill(location: DatabaseLocation, workdir: Path, kills: int = 10,
                            workers: int = 2, routers: int = 50, seed: int = 1,
                            up_seconds: tuple[float, float] = (1.0, 3.0)) -> DrillResult:
    rng = random.Random(seed)
    server = ServerRunner(location, workdir, HTTP_WORKERS=str(workers),
                          RULE_GENERATION_ENABLED="false").start()
    supervisor = server.process.pid
    fleet = Fleet([server.url], routers, pause_seconds=0.3, request_timeout=10)
    started = time.monotonic()
    running = asyncio.create_task(fleet.run(seconds=3600))
    replaced_in, held = [], 0
    try:
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(*up_seconds))
            victim = rng.choice(server.children("serving"))
            held += connections_of(victim, server.port)
            _kill(victim)
            replaced_in.append(await replace_worker(server, victim, workers))
        answered_before = sum(fleet.ledger.statuses.values())
        await asyncio.sleep(max(up_seconds))
        answered_after = sum(fleet.ledger.statuses.values()) - answered_before
    finally:
        fleet.stop()
        ledger = await running
        survived = server.process.pid == supervisor and server.process.poll() is None
        await asyncio.to_thread(server.stop)
    return DrillResult(ledger, check_ledger(location, ledger), kills, replaced_in, held,
                       survived, answered_after, time.monotonic() - started)


def connections_of(pid: int, port: int) -> int:
    """The established connections a worker holds on the service's port."""
    return sum(1 for connection in psutil.Process(pid).net_connections("tcp")
               if connection.status == psutil.CONN_ESTABLISHED and connection.laddr.port == port)


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--routers", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with throwaway_database() as (location, workdir):
        result = asyncio.run(worker_kill_drill(location, workdir, args.kills, args.workers,
                                               args.routers, args.seed))
    print(f"{result.kills} HTTP workers SIGKILLed under load ({args.workers} workers, "
          f"{args.routers} routers); replaced in {min(result.replaced_in):.2f}-"
          f"{max(result.replaced_in):.2f}s; supervisor "
          f"{'kept running' if result.supervisor_survived else 'DIED'}; "
          f"{result.answered_after_last_kill} answers after the last kill; "
          f"{result.ledger.connection_errors} requests failed, the killed workers held "
          f"{result.connections_held} connections")
    print(summary(result.ledger, result.check, result.seconds))
    print("worker kill drill:", "PASSED" if result.ok else "FAILED")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
