"""Interrupt drill: SIGKILL at many points of a first start, and of an upgrade from migration
0001 of a filled database, each followed by a normal start.

    python -m bench.interrupt_drill [--points 20]

Each kill point is one offset of a start, spread evenly over the time a start of the same kind
took in the same run; the kill alternates between the service's process alone (a crash, the
OOM killer) and its whole process group (systemd's stop, or Ctrl-C in a terminal, made
harsher). Every start runs on the embedded PostgreSQL in a DATA_DIR of its own.

It passes when, after every kill, a normal start serves `/health`, `router-backend migrate`
and `status` succeed, and (upgrade) every record the database held at 0001 is exported once
after compaction. tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import psutil

from server.db.connect import connect
from server.db.embedded import EmbeddedPostgres
from server.db.location import DatabaseLocation
from server.db.migrate import ensure_database
from testkit import CORPUS, REPOSITORY
from testkit.database import migrate
from testkit.server import ServerRunner, embedded_env, router_backend
from testkit.workers import processes_on

ROUTERS = [f"02:00:00:00:1e:{n:02x}" for n in range(4)]
DB_NAME = "router_backend"


@dataclass
class Round:
    kind: str          # first start or upgrade
    offset: float      # seconds after the start when the kill came
    group: bool        # the whole process group killed, or the service's process alone
    failure: str = ""  # empty when the start after it was clean


@dataclass
class DrillResult:
    rounds: list[Round] = field(default_factory=list)
    start_seconds: dict[str, float] = field(default_factory=dict)
    records: int = 0

    @property
    def failures(self) -> list[Round]:
        return [r for r in self.rounds if r.failure]

    @property
    def ok(self) -> bool:
        return bool(self.rounds) and not self.failures


def timed_start(data_dir: Path) -> float:
    """Seconds a start from `data_dir` as it is takes until it listens (the runner stopped)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    runner = ServerRunner(None, data_dir)
    began = time.monotonic()
    runner.start(timeout=120)
    took = time.monotonic() - began
    runner.stop()
    return took


def killed_start(data_dir: Path, offset: float, group: bool) -> None:
    """A start from `data_dir`, SIGKILLed `offset` seconds in (or once it listens, if sooner)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    runner = ServerRunner(None, data_dir)
    with runner.log_path.open("ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "ops", "serve"], env=runner.env,
                                   stdout=log, stderr=log, cwd=REPOSITORY,
                                   start_new_session=True)
    time.sleep(offset)
    if group:
        os.killpg(process.pid, signal.SIGKILL)
    else:
        process.kill()
    process.wait()


def clean_start_failure(data_dir: Path) -> str:
    """What went wrong with a normal start after a kill, and the commands after it; empty if
    nothing did."""
    runner = ServerRunner(None, data_dir)
    try:
        runner.start(timeout=120)
    except RuntimeError as error:
        return f"start: {str(error)[-400:]}"
    request = urllib.request.Request(f"{runner.url}/health", headers={"X-ID": ROUTERS[0]})
    try:
        with urllib.request.urlopen(request, timeout=10):
            pass  # (an answer other than 2xx raises)
    except OSError as error:
        return f"/health: {error}"
    finally:
        runner.stop()
    for command in (("migrate",), ("status",)):
        result = router_backend(embedded_env(data_dir), *command)
        if result.returncode != 0:
            return f"{command[0]}: {result.stderr[-400:]}"
    return ""


def fill_at_0001(data_dir: Path) -> dict[str, list[bytes]]:
    """An embedded database at migration 0001 holding real EVE records of ROUTERS as the rows
    of that release; what each router must get back."""
    embedded = EmbeddedPostgres(data_dir / "postgres")
    socket_dir = embedded.start()
    location = DatabaseLocation(host=socket_dir, port=5432, name=DB_NAME, user="postgres",
                                password="", sslmode="disable")
    try:
        ensure_database(location)
        migrate(location, "0001.initial-schema")
        return _insert_records(location)
    finally:
        embedded.stop()


def _insert_records(location: DatabaseLocation) -> dict[str, list[bytes]]:
    expected: dict[str, list[bytes]] = {mac: [] for mac in ROUTERS}
    lines = [line for path in sorted((CORPUS / "eve").glob("*.json"))
             for line in path.read_bytes().splitlines() if line.strip()]
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany("INSERT INTO routers (mac) VALUES (%s)", [(mac,) for mac in ROUTERS])
            for n, line in enumerate(lines):
                record = orjson.loads(line)
                table = {"alert": "ids_events", "flow": "cfm_records"}.get(
                    record.get("event_type"))
                if table is None:
                    continue
                mac = ROUTERS[n % len(ROUTERS)]
                cur.execute(f"INSERT INTO {table} (mac, received_at, event_type, record) "
                            "VALUES (%s, now() - interval '1 day', %s, %s)",
                            (mac, record["event_type"], line.decode()))
                expected[mac].append(canonical(record))
    finally:
        conn.close()
    return expected


def canonical(record: dict) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def records_failure(data_dir: Path, expected: dict[str, list[bytes]]) -> str:
    """Compaction moves the rows of 0001 into chunks; then each router's export must be what
    it had, each record once."""
    result = router_backend(embedded_env(data_dir), "telemetry", "compact", "--all")
    if result.returncode != 0:
        return f"compact: {result.stderr[-400:]}"
    for mac, records in expected.items():
        result = router_backend(embedded_env(data_dir), "telemetry", "export", "--mac", mac)
        exported = sorted(canonical(orjson.loads(line))
                          for line in result.stdout.splitlines() if line.strip())
        if result.returncode != 0 or exported != sorted(records):
            return (f"{mac}: {len(exported)} records exported, {len(records)} expected "
                    f"{result.stderr[-200:]}")
    return ""


def copy_data_dir(source: Path, target: Path) -> None:
    """A copy with owners and modes kept (as root the embedded server runs as a user of its
    own, which must still own its files)."""
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)


def discard(data_dir: Path) -> None:
    """Remove a round's DATA_DIR, and any server a failed round left running on it."""
    for process in processes_on(data_dir):
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    shutil.rmtree(data_dir, ignore_errors=True)


def offsets(span: float, points: int) -> list[float]:
    return [span * (n + 0.5) / points for n in range(points)]


def interrupt_drill(workdir: Path, points: int = 20) -> DrillResult:
    result = DrillResult()
    # First start: a new DATA_DIR each round.
    result.start_seconds["first start"] = timed_start(workdir / "timing-first")
    for n, offset in enumerate(offsets(result.start_seconds["first start"], points)):
        data_dir = workdir / f"first-{n}"
        killed_start(data_dir, offset, group=n % 2 == 1)
        round_ = Round("first start", offset, n % 2 == 1)
        round_.failure = clean_start_failure(data_dir)
        result.rounds.append(round_)
        discard(data_dir)
    # Upgrade: a copy of one filled DATA_DIR at 0001 each round.
    template = workdir / "at-0001"
    expected = fill_at_0001(template)
    result.records = sum(map(len, expected.values()))
    timing = workdir / "timing-upgrade"
    copy_data_dir(template, timing)
    result.start_seconds["upgrade"] = timed_start(timing)
    for n, offset in enumerate(offsets(result.start_seconds["upgrade"], points)):
        data_dir = workdir / f"upgrade-{n}"
        copy_data_dir(template, data_dir)
        killed_start(data_dir, offset, group=n % 2 == 1)
        round_ = Round("upgrade", offset, n % 2 == 1)
        round_.failure = clean_start_failure(data_dir) or records_failure(data_dir, expected)
        result.rounds.append(round_)
        discard(data_dir)
    return result


def report(result: DrillResult) -> str:
    lines = [f"{kind}: a start took {seconds:.1f} s" for kind, seconds in
             result.start_seconds.items()]
    lines.append(f"upgrade: {result.records} records at migration 0001 in each round")
    for kind in result.start_seconds:
        rounds = [r for r in result.rounds if r.kind == kind]
        failed = [r for r in rounds if r.failure]
        lines.append(f"{kind}: {len(rounds)} SIGKILLs (at "
                     f"{', '.join(f'{r.offset:.1f}' for r in rounds)} s), "
                     f"{len(failed)} starts after them failed")
    for r in result.failures:
        lines.append(f"  FAILED {r.kind} killed at {r.offset:.2f} s "
                     f"({'group' if r.group else 'process'}): {r.failure}")
    lines.append("PASSED" if result.ok else "FAILED")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="interrupt-drill-") as workdir:
        result = interrupt_drill(Path(workdir), args.points)
    print(report(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
