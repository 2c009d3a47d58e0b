"""Postmaster drill (issue 61): the embedded PostgreSQL's postmaster SIGKILLed (as an attacker
of the host or the OOM killer would) three times while a fleet uploads; the service, never
restarted, starts it again (server/db/lifecycle.py keep_alive, the supervisor's watch).

    python -m bench.postmaster_drill [--kills 3] [--routers 20] [--workers 1]

Passes when, after each kill, uploads are acknowledged again within 30 s, and none is
answered 503 from 2 s after that until the next kill (a red team saw 503s 51 s after the
database was back); no answer takes more than 10 s; only 200 and 503 are answered (and 429, the routers' own request budget);
every acknowledged record is stored exactly once (the fleet's ledger, bench/fleet.py).
tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.fleet import Fleet, Ledger, LedgerCheck, check_ledger, summary
from server.db.embedded import EmbeddedPostgres
from server.db.location import DatabaseLocation
from testkit.server import ServerRunner

BACK_WITHIN_SECONDS = 30.0
SETTLE_SECONDS = 2.0  # after the first upload acknowledged again, the others' retries land
SERVED_SECONDS = 6.0  # watched for 503s after each recovery
SLOWEST_ANSWER_SECONDS = 10.0
ALLOWED = {200, 429, 503}


@dataclass
class DrillResult:
    ledger: Ledger
    check: LedgerCheck
    back_after: list[float] = field(default_factory=list)  # seconds, one per kill
    slowest: float = 0.0
    statuses: set = field(default_factory=set)
    late_503s: int = 0  # uploads begun SETTLE_SECONDS after a recovery, answered 503

    @property
    def ok(self) -> bool:
        return (self.check.ok and len(self.back_after) > 0 and self.late_503s == 0
                and all(s <= BACK_WITHIN_SECONDS for s in self.back_after)
                and self.slowest <= SLOWEST_ANSWER_SECONDS and self.statuses <= ALLOWED)


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])


async def acknowledged_since(ledger: Ledger, moment: float, timeout: float) -> float | None:
    """Seconds after `moment` until an upload that began after it was acknowledged."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, began, seconds, status in ledger.uploads:
            if began > moment and status == 200:
                return began + seconds - moment
        await asyncio.sleep(0.2)
    return None


async def postmaster_drill(data_dir: Path, kills: int = 3, routers: int = 20,
                           workers: int = 1) -> DrillResult:
    server = ServerRunner(None, data_dir, RULE_GENERATION_ENABLED="false",
                          HTTP_WORKERS=str(workers)).start(timeout=120)
    fleet = Fleet([server.url], routers, pause_seconds=0.3, request_timeout=20)
    running = asyncio.create_task(fleet.run(seconds=3600))
    back_after = []
    served: list[tuple[float, float]] = []  # after each recovery, when no 503 may come
    try:
        await asyncio.sleep(3)
        for _ in range(kills):
            killed_at = time.monotonic()
            os.kill(postmaster_pid(data_dir), signal.SIGKILL)
            back = await acknowledged_since(fleet.ledger, killed_at, BACK_WITHIN_SECONDS + 30)
            back_after.append(back if back is not None else float("inf"))
            await asyncio.sleep(SERVED_SECONDS)
            if back is not None:
                served.append((killed_at + back + SETTLE_SECONDS, time.monotonic()))
    finally:
        fleet.stop()
        ledger = await running
        await asyncio.to_thread(server.stop)
    embedded = EmbeddedPostgres(data_dir / "postgres")
    socket_dir = embedded.start()
    try:
        location = DatabaseLocation(host=socket_dir, port=5432, name="router_backend",
                                    user="postgres", password="", sslmode="disable")
        check = check_ledger(location, ledger)
    finally:
        embedded.stop()
    late = sum(1 for _, began, seconds, status in ledger.uploads if status == 503
               and any(start < began and began + seconds < end for start, end in served))
    return DrillResult(ledger, check, back_after,
                       max((seconds for *_, seconds, _ in ledger.uploads), default=0.0),
                       {status for *_, status in ledger.uploads}, late)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--routers", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="postmaster-drill-") as directory:
        started = time.monotonic()
        result = asyncio.run(postmaster_drill(Path(directory), args.kills, args.routers,
                                              args.workers))
    print(f"{args.kills} postmaster kills, HTTP_WORKERS={args.workers}: uploads acknowledged "
          f"again after {', '.join(f'{s:.1f}' for s in result.back_after)} s; slowest answer "
          f"{result.slowest:.1f} s; statuses {sorted(result.statuses)}; "
          f"{result.late_503s} answered 503 after the recovery")
    print(summary(result.ledger, result.check, time.monotonic() - started))
    print("postmaster drill:", "PASSED" if result.ok else "FAILED")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
