"""Agent drill: router agents deliver every EVE line exactly once through every fault.

    python -m bench.agent_drill [--agents 4] [--rounds 10] [--cut-seconds 6]

Several `router-agent run` processes (agent/) each tail an eve.json that a writer keeps
appending real EVE lines to (the corpus's alerts and flows, each with a unique flow_id) and
rotates logrotate-style (eve.json -> eve.json.1 -> eve.json.2 ...). The agents reach the
service through a TCP proxy (testkit/tcp_proxy.py); the service runs on an embedded
PostgreSQL with the fixture ruleset, regenerating every router every few seconds. Each round
the drill, with the writers going on:

- server: SIGKILLs the service and starts it again;
- database: stops PostgreSQL (fast) and starts it again;
- cut: cuts the network between agents and service (nothing passes, nothing closes) for
  --cut-seconds, longer than the agents' request timeout;
- answers lost: what the service sends on the connections open at that moment never
  arrives (the uploads in progress commit; their agents time out and send again);
- agent: SIGKILLs one agent (in turn) and starts it again.

Then the writers stop and the drill waits for the agents to drain. It checks, by flow_id,
that every line written is stored exactly once (alerts in ids_events, flows in cfm_records),
and that each agent's applied ETags are the service's current ones; it prints the figures.
tests/test_drills.py runs a quick version (one round).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.fault_drill import restart_database
from bench.outage_drill import StoppableDatabase
from testkit import CORPUS, REPOSITORY
from testkit.database import Sql
from testkit.telemetry import stored_count, telemetry
from testkit.rule_archives import fixture_members, make_zip
from testkit.server import ServerRunner
from testkit.tcp_proxy import TcpProxy

KINDS = {"alert": "ids_events", "flow": "cfm_records"}  # read back by testkit/telemetry.py
STORED_KINDS = {"alert": "events", "flow": "cfm"}
KEEP_ROTATED = 9
AGENT_TIMEOUT_SECONDS = 3


@dataclass
class AgentDrillResult:
    agents: int = 0
    faults: Counter = field(default_factory=Counter)
    written: Counter = field(default_factory=Counter)       # kind -> lines
    stored: Counter = field(default_factory=Counter)        # kind -> distinct flow ids stored
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0                                       # stored, never written
    drain_seconds: float = 0.0
    etags_current: int = 0
    stale: list[str] = field(default_factory=list)           # what each stale agent holds
    rotations: int = 0
    counters: Counter = field(default_factory=Counter)      # the agents' own, summed
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (not self.lost and not self.duplicated and not self.unexpected
                and self.etags_current == self.agents)


def corpus_records() -> list[dict]:
    """The corpus's alerts and flows, the shapes a router's Suricata writes."""
    records = []
    for path in sorted((CORPUS / "eve").glob("*.json")):
        for line in path.read_bytes().splitlines():
            record = json.loads(line)
            if record.get("event_type") in KINDS:
                records.append(record)
    return records


class EveWriter:
    """Suricata for one router: appends lines with unique flow ids, rotates every so often."""

    def __init__(self, path: Path, number: int, records: list[dict], rotate_every: int):
        self.path = path
        self._number = number
        self._records = records
        self._rotate_every = rotate_every
        self._next = 0
        self.written: dict[str, list[int]] = {kind: [] for kind in KINDS}
        self.rotations = 0

    def write(self, lines: int) -> None:
        while lines:
            before_rotation = self._rotate_every - self._next % self._rotate_every
            count = min(lines, before_rotation)
            with open(self.path, "ab") as eve:
                eve.write(b"".join(self._line() for _ in range(count)))
            lines -= count
            if self._next % self._rotate_every == 0:
                self._rotate()

    def _line(self) -> bytes:
        record = dict(self._records[(self._number * 7919 + self._next) % len(self._records)])
        record["flow_id"] = self._number * 10**9 + self._next
        self.written[record["event_type"]].append(record["flow_id"])
        self._next += 1
        return json.dumps(record).encode() + b"\n"

    def _rotate(self) -> None:
        for older in range(KEEP_ROTATED - 1, 0, -1):
            source = self.path.with_name(f"{self.path.name}.{older}")
            if source.exists():
                os.replace(source, self.path.with_name(f"{self.path.name}.{older + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self.rotations += 1


class AgentProcess:
    def __init__(self, directory: Path, mac: str, url: str):
        self.directory = directory
        self.mac = mac
        self.config = directory / "agent.ini"
        self.state_dir = directory / "state"
        self.config.write_text(
            f"[agent]\nserver_url = {url}\nmac = {mac}\nstate_dir = {self.state_dir}\n"
            f"eve_json = {directory / 'eve.json'}\nrules_file = {directory / 'r.rules'}\n"
            f"firewall_file = {directory / 'block.nft'}\nupload_seconds = 0.5\n"
            f"poll_seconds = 2\nbatch_records = 200\n"
            f"timeout_seconds = {AGENT_TIMEOUT_SECONDS}\nretry_max_seconds = 3\n"
            "start_delay_max_seconds = 0.5\n")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.directory / "agent.log", "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "agent.cli", "--config", str(self.config), "run"],
                stdout=log, stderr=log, cwd=REPOSITORY, start_new_session=True)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)

    def state(self) -> dict:
        path = self.state_dir / "state.json"
        return json.loads(path.read_text()) if path.exists() else {}


async def write_steadily(writers: list[EveWriter], stop: asyncio.Event,
                         lines_per_tick: int = 20, tick: float = 0.25) -> None:
    while not stop.is_set():
        for writer in writers:
            writer.write(lines_per_tick)
        await asyncio.sleep(tick)


async def lose_answers(proxy: TcpProxy, seconds: float, tries: int = 20) -> None:
    """What the service sends on the connections open now never arrives: an upload in
    progress commits, its agent times out and sends the batch again. Tried until some
    connection is open (an agent's upload takes a few milliseconds)."""
    for _ in range(tries):
        if proxy.open_connections():
            break
        await asyncio.sleep(0.01)
    proxy.hold_open_connections("to_client")
    await asyncio.sleep(seconds)
    proxy.restore()


def stored_flow_ids(location, table: str) -> Counter:
    rows = telemetry(location).rows(f"SELECT (record->>'flow_id')::bigint, count(*) "
                                    f"FROM {table} GROUP BY 1")
    return Counter(dict(rows))


async def wait_drained(location, writers: list[EveWriter], timeout: float) -> float:
    started = time.monotonic()
    expected = {kind: sum(len(w.written[kind]) for w in writers) for kind in KINDS}
    while time.monotonic() - started < timeout:
        counts = {kind: await asyncio.to_thread(stored_count, Sql(location),
                                                STORED_KINDS[kind])
                  for kind in KINDS}
        if all(counts[kind] >= expected[kind] for kind in KINDS):
            break
        await asyncio.sleep(1)
    return time.monotonic() - started


def bare(etag: str | None) -> str | None:
    return etag.removeprefix("W/").strip('"') if etag else None


async def wait_etags_current(location, agents: list[AgentProcess],
                             timeout: float) -> tuple[int, list[str]]:
    """Agents whose applied ETags are the service's current ones (once all are, or time is
    up): generation settles once the telemetry stops, then each agent's next poll applies.
    With them, what each stale agent holds and its last log lines."""
    deadline = time.monotonic() + timeout
    while True:
        current = {mac: (ids, firewall) for mac, ids, firewall in await asyncio.to_thread(
            Sql(location).rows, "SELECT mac::text, ids_etag, firewall_etag FROM router_rules")}
        matching = 0
        for agent in agents:
            applied = agent.state().get("applied", {})
            mine = (bare(applied.get("ids", {}).get("etag")),
                    bare(applied.get("firewall", {}).get("etag")))
            matching += current.get(agent.mac) == mine
        if matching == len(agents) or time.monotonic() > deadline:
            stale = []
            for agent in agents:
                applied = agent.state().get("applied", {})
                if current.get(agent.mac) != (bare(applied.get("ids", {}).get("etag")),
                                              bare(applied.get("firewall", {}).get("etag"))):
                    log_tail = (agent.directory / "agent.log").read_text()[-1500:]
                    stale.append(f"{agent.mac}: holds {applied}, service has "
                                 f"{current.get(agent.mac)}; log:\n{log_tail}")
            return matching, stale
        await asyncio.sleep(1)


async def agent_drill(directory: Path, agents: int = 4, rounds: int = 10,
                      cut_seconds: float = 6, settle_seconds: float = 2,
                      interval: int = 3) -> AgentDrillResult:
    result = AgentDrillResult(agents=agents)
    started = time.monotonic()
    db = await asyncio.to_thread(StoppableDatabase, directory)
    archive = directory / "archive.zip"
    archive.write_bytes(make_zip(fixture_members()))
    (directory / "version.txt").write_text("agent-drill")
    server = ServerRunner(db.location, directory,
                          RULE_GENERATION_INTERVAL_SECONDS=str(interval),
                          RULE_PREPROCESS_AT_START="true",
                          RULE_DATA_DIR=str(directory / "rules"),
                          RULE_PREPROCESS_ARCHIVE_URL=archive.as_uri(),
                          RULE_PREPROCESS_VERSION_URL=(directory / "version.txt").as_uri())
    await asyncio.to_thread(server.start)
    proxy = await TcpProxy("127.0.0.1", server.port).start()
    records = corpus_records()
    processes, writers = [], []
    for number in range(agents):
        home = directory / f"agent-{number}"
        home.mkdir()
        processes.append(AgentProcess(home, f"02:00:00:00:ad:{number:02x}",
                                      f"http://127.0.0.1:{proxy.port}"))
        writers.append(EveWriter(home / "eve.json", number + 1, records, rotate_every=450))
    for process in processes:
        process.start()
    stop_writing = asyncio.Event()
    writing = asyncio.create_task(write_steadily(writers, stop_writing))
    try:
        for number in range(rounds):
            await asyncio.to_thread(server.kill)
            await asyncio.to_thread(server.start)
            result.faults["server SIGKILL"] += 1
            await asyncio.sleep(settle_seconds)
            await restart_database(db)
            result.faults["PostgreSQL restart"] += 1
            await asyncio.sleep(settle_seconds)
            proxy.cut()
            await asyncio.sleep(cut_seconds)
            proxy.restore()
            result.faults["network cut"] += 1
            await asyncio.sleep(settle_seconds)
            await lose_answers(proxy, AGENT_TIMEOUT_SECONDS + 1)
            result.faults["answers lost"] += 1
            await asyncio.sleep(settle_seconds)
            victim = processes[number % agents]
            await asyncio.to_thread(victim.kill)
            await asyncio.sleep(0.5)
            victim.start()
            result.faults["agent SIGKILL"] += 1
            await asyncio.sleep(settle_seconds)
        stop_writing.set()
        await writing
        result.drain_seconds = await wait_drained(db.location, writers, timeout=180)
        result.etags_current, result.stale = await wait_etags_current(
            db.location, processes, timeout=max(60, 10 * interval))
        check_exactly_once(db.location, writers, result)
        for process in processes:
            result.counters.update(process.state().get("counters", {}))
        result.rotations = sum(writer.rotations for writer in writers)
    finally:
        stop_writing.set()
        for process in processes:
            await asyncio.to_thread(process.stop)
        await asyncio.to_thread(server.stop)
        await proxy.close()
        await asyncio.to_thread(db.close)
    result.seconds = time.monotonic() - started
    return result


def check_exactly_once(location, writers: list[EveWriter], result: AgentDrillResult) -> None:
    for kind, table in KINDS.items():
        written = {flow_id for writer in writers for flow_id in writer.written[kind]}
        stored = stored_flow_ids(location, table)
        result.written[kind] = len(written)
        result.stored[kind] = len(stored)
        result.lost += len(written - set(stored))
        result.duplicated += sum(count - 1 for count in stored.values() if count > 1)
        result.unexpected += len(set(stored) - written)


def report(result: AgentDrillResult) -> str:
    faults = ", ".join(f"{name} x{count}" for name, count in result.faults.items())
    counters = result.counters
    return "\n".join([
        f"{result.agents} agents, faults: {faults}; {result.rotations} rotations of eve.json",
        f"lines written: {result.written['alert']} alerts, {result.written['flow']} flows; "
        f"stored: {result.stored['alert']} and {result.stored['flow']} distinct flow ids",
        f"lost: {result.lost}, stored twice or more: {result.duplicated}, stored but never "
        f"written: {result.unexpected}; drained {result.drain_seconds:.1f}s after the writers "
        "stopped",
        f"agents: {counters['batches_sent']} batches sent, {counters['batches_replayed']} "
        f"replayed (stored by an earlier try whose answer was lost), "
        f"{counters['batches_refused']} refused, "
        f"{counters['batches_dropped_spool_full']} dropped from a full spool",
        f"applied ETags current on {result.etags_current}/{result.agents} agents; "
        f"{result.seconds:.0f}s in all; {'OK' if result.ok else 'FAILED'}",
        *result.stale])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--cut-seconds", type=float, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agent-drill-") as directory:
        result = asyncio.run(agent_drill(Path(directory), args.agents, args.rounds,
                                         args.cut_seconds))
    print(report(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
