"""Backup drill: fill, back up while routers keep uploading, restore onto a fresh DATA_DIR.

    python -m bench.backup_drill [--routers 40] [--fill 20] [--after 5]

The service runs on its embedded PostgreSQL; a fleet (bench/fleet.py, real EVE records)
uploads for `--fill` seconds, then `router-backend backup` runs while it goes on uploading,
and the fleet keeps on for `--after` seconds more. The backup is restored with
`router-backend restore` into a new DATA_DIR. It passes when every record acknowledged before
the backup began is in the restored database exactly once, and the restored service starts.
It prints the backup's cost: the fleet's acknowledged records a second during the backup
against before it, in the same run. tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.fleet import Fleet, Ledger, check_ledger
from server.db.embedded import EmbeddedPostgres
from server.db.location import DatabaseLocation
from testkit.server import ServerRunner, embedded_env, router_backend


@dataclass
class BackupResult:
    records_before: int = 0          # acknowledged before the backup began
    missing: int = -1                # of those, absent from the restored database
    duplicated: int = -1
    rate_before: float = 0.0         # acknowledged records a second, before the backup
    rate_during: float = 0.0         # the same, while it ran
    backup_seconds: float = 0.0
    backup_bytes: int = 0
    restored_serves: bool = False
    failure: str = ""

    @property
    def ok(self) -> bool:
        return (not self.failure and self.records_before > 0 and self.missing == 0
                and self.duplicated == 0 and self.restored_serves)


async def count_at(ledger: Ledger, seconds: float) -> tuple[int, float]:
    await asyncio.sleep(seconds)
    return ledger.records_acknowledged, time.monotonic()


async def backup_drill(workdir: Path, routers: int = 40, fill_seconds: float = 20,
                       after_seconds: float = 5) -> BackupResult:
    result = BackupResult()
    source = workdir / "source"
    backup_file = workdir / "backup.dump"
    server = ServerRunner(None, source, RULE_GENERATION_ENABLED="false").start(timeout=120)
    try:
        fleet = Fleet([server.url], routers, pause_seconds=0.2)
        running = asyncio.create_task(fleet.run(fill_seconds + 600))
        # The rate before: from a warm-up of a fifth of the fill to its end.
        start_count, start_time = await count_at(fleet.ledger, fill_seconds / 5)
        end_count, end_time = await count_at(fleet.ledger, fill_seconds * 4 / 5)
        result.rate_before = (end_count - start_count) / (end_time - start_time)
        acknowledged_before = copy.deepcopy(fleet.ledger.acknowledged)
        result.records_before = fleet.ledger.records_acknowledged
        began = time.monotonic()
        made = await asyncio.to_thread(router_backend, embedded_env(source), "backup",
                                       "--output", str(backup_file))
        result.backup_seconds = time.monotonic() - began
        result.rate_during = ((fleet.ledger.records_acknowledged - result.records_before)
                              / result.backup_seconds)
        await asyncio.sleep(after_seconds)
        fleet.stop()
        await running
    finally:
        server.stop()
    if made.returncode != 0:
        result.failure = f"backup: {made.stderr[-400:]}"
        return result
    result.backup_bytes = backup_file.stat().st_size
    restored = workdir / "restored"
    done = router_backend(embedded_env(restored), "restore", str(backup_file))
    if done.returncode != 0:
        result.failure = f"restore: {done.stderr[-400:]}"
        return result
    check = check_restored(restored, Ledger(macs=fleet.ledger.macs,
                                            acknowledged=acknowledged_before))
    result.missing, result.duplicated = check.acknowledged_missing, check.duplicated
    again = ServerRunner(None, restored, RULE_GENERATION_ENABLED="false").start(timeout=120)
    result.restored_serves = again.stop() == 0
    return result


def check_restored(data_dir: Path, ledger: Ledger):
    embedded = EmbeddedPostgres(data_dir / "postgres")
    socket_dir = embedded.start()
    try:
        location = DatabaseLocation(host=socket_dir, port=5432, name="router_backend",
                                    user="postgres", password="", sslmode="disable")
        return check_ledger(location, ledger)
    finally:
        embedded.stop()


def report(result: BackupResult) -> str:
    cost = result.rate_during / result.rate_before if result.rate_before else 0.0
    lines = [f"backup: {result.backup_bytes / 1e6:.1f} MB in {result.backup_seconds:.1f} s "
             f"while the fleet uploaded",
             f"ingest: {result.rate_before:.0f} acknowledged records/s before the backup, "
             f"{result.rate_during:.0f} during it ({cost:.2f}x)",
             f"restore: {result.records_before} records acknowledged before the backup, "
             f"{result.missing} missing, {result.duplicated} stored twice; restored service "
             f"{'started' if result.restored_serves else 'did not start'}"]
    if result.failure:
        lines.append(result.failure)
    lines.append("PASSED" if result.ok else "FAILED")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=40)
    parser.add_argument("--fill", type=float, default=20)
    parser.add_argument("--after", type=float, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="backup-drill-") as workdir:
        result = asyncio.run(backup_drill(Path(workdir), args.routers, args.fill, args.after))
    print(report(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
