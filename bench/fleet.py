"""A simulated router fleet: N routers (distinct MACs) that, concurrently and with jitter, do
what a real agent does, and a ledger of every batch the server acknowledged.

    python -m bench.fleet [--routers 200] [--seconds 30] [--servers 1]

Each router, in a loop: posts a batch of EVE alert records to /log/events and of flow records
to /log/cfm (replayed from the corpus's eve/ with fresh timestamps; NDJSON or a JSON array,
sometimes gzip-compressed), calls /rules/last_updated, and fetches /rules/ids and
/rules/firewall with If-None-Match. Every record carries a unique `flow_id`, so the ledger can
be checked against the database: every acknowledged record stored exactly once, and every
request that got no answer stored whole or not at all. Bounded in time and request count;
it only talks to loopback addresses.

The CLI starts its own database and server process(es) and prints throughput, answers by
status, and the ledger check. The drills (crash_drill, outage_drill) drive the same Fleet.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import ipaddress
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urlparse

import aiohttp
import orjson

from server.db.connect import connect
from server.db.location import DatabaseLocation
from testkit import CORPUS, FIXTURES
from testkit.corpus import publish_corpus_ruleset
from testkit.database import throwaway_database
from testkit.telemetry import load_record_tables
from testkit.server import ServerRunner

CORPUS_EVE = CORPUS / "eve"
FIXTURE_EVE = FIXTURES / "eve-sample.ndjson"
TABLES = {"events": "ids_events", "cfm": "cfm_records"}
FLOW_ID_SPAN = 10**9  # flow_id = router number * span + sequence: unique across the fleet


def corpus_records() -> dict[str, list[dict]]:
    """EVE alerts (for /log/events) and flows (for /log/cfm) from the corpus, or the fixture."""
    records: dict[str, list[dict]] = {"events": [], "cfm": []}
    for path in sorted(CORPUS_EVE.glob("*.json")) or [FIXTURE_EVE]:
        for line in path.read_bytes().splitlines():
            if line.strip():
                record = orjson.loads(line)
                kind = {"alert": "events", "flow": "cfm"}.get(record.get("event_type"))
                if kind:
                    records[kind].append(record)
    return records


@dataclass
class Ledger:
    """What the fleet knows of its batches: acknowledged (200), refused (an error answer: must
    be stored not at all) or unanswered (connection lost: stored whole or not at all)."""
    macs: list[str] = field(default_factory=list)
    acknowledged: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    refused: list[tuple[str, str, list[int]]] = field(default_factory=list)
    unanswered: list[tuple[str, str, list[int]]] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)       # (path, status) -> count
    answers_by_server: Counter = field(default_factory=Counter)  # base URL -> answers
    connection_errors: int = 0
    stored_unknown: int = 0   # 503 "stored": "unknown": the commit's outcome could not be known
    requests: int = 0
    records_acknowledged: int = 0
    # Every upload's (mac, when it began on the monotonic clock, seconds, status; 0: no answer)
    uploads: list[tuple[str, float, float, int]] = field(default_factory=list)

    def acknowledge(self, mac: str, kind: str, flow_ids: list[int]) -> None:
        self.acknowledged.setdefault(mac, {}).setdefault(kind, []).extend(flow_ids)
        self.records_acknowledged += len(flow_ids)

    def server_errors(self) -> dict[tuple[str, int], int]:
        """Answers 500 and above other than 503 (the only 5xx a router may see)."""
        return {key: n for key, n in self.statuses.items() if key[1] >= 500 and key[1] != 503}


def stored_unknown(status: int, reply: bytes) -> bool:
    if status != 503:
        return False
    try:
        return orjson.loads(reply).get("stored") == "unknown"
    except orjson.JSONDecodeError:
        return False


class Router:
    def __init__(self, number: int, mac: str, fleet: "Fleet"):
        self.number, self.mac, self.fleet = number, mac, fleet
        self.sequence = 0
        self.etags: dict[str, str] = {}
        self.rng = random.Random(number)

    def batch(self, kind: str) -> tuple[list[int], bytes, dict[str, str]]:
        source = self.fleet.records[kind]
        now = datetime.now(timezone.utc).isoformat()
        records, flow_ids = [], []
        for _ in range(self.fleet.batch_records):
            self.sequence += 1
            flow_id = self.number * FLOW_ID_SPAN + self.sequence
            record = dict(self.rng.choice(source), timestamp=now, flow_id=flow_id)
            records.append(record)
            flow_ids.append(flow_id)
        headers = {"X-ID": self.mac}
        if self.rng.random() < 0.5:
            body = b"\n".join(orjson.dumps(r) for r in records) + b"\n"
            headers["Content-Type"] = "application/x-ndjson"
        else:
            body = orjson.dumps(records)
            headers["Content-Type"] = "application/json"
        if self.rng.random() < 0.3:
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        return flow_ids, body, headers

    async def post(self, session: aiohttp.ClientSession, base: str, kind: str) -> None:
        flow_ids, body, headers = self.batch(kind)
        path = f"/log/{kind}"
        started = time.monotonic()
        try:
            async with session.post(base + path, data=body, headers=headers) as response:
                reply = await response.read()
                self.fleet.ledger.statuses[(path, response.status)] += 1
                self.fleet.ledger.answers_by_server[base] += 1
                self.fleet.ledger.uploads.append((self.mac, started, time.monotonic() - started,
                                                  response.status))
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            self.fleet.ledger.uploads.append((self.mac, started, time.monotonic() - started, 0))
            self.fleet.ledger.connection_errors += 1
            self.fleet.ledger.unanswered.append((self.mac, kind, flow_ids))
            return
        if response.status == 200:
            report = orjson.loads(reply)
            if report["accepted"] != len(flow_ids):
                raise AssertionError(f"{self.mac}: {report}")
            self.fleet.ledger.acknowledge(self.mac, kind, flow_ids)
        elif stored_unknown(response.status, reply):  # as if unanswered: whole or nothing
            self.fleet.ledger.stored_unknown += 1
            self.fleet.ledger.unanswered.append((self.mac, kind, flow_ids))
        else:  # an error answer: the server says it stored nothing of it
            self.fleet.ledger.refused.append((self.mac, kind, flow_ids))

    async def get(self, session: aiohttp.ClientSession, base: str, path: str) -> None:
        headers = {"X-ID": self.mac, "Accept-Encoding": "gzip"}
        if path in self.etags:
            headers["If-None-Match"] = self.etags[path]
        try:
            async with session.get(base + path, headers=headers) as response:
                await response.read()
                self.fleet.ledger.statuses[(path, response.status)] += 1
                self.fleet.ledger.answers_by_server[base] += 1
                if response.status == 200 and "ETag" in response.headers:
                    self.etags[path] = response.headers["ETag"]
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            self.fleet.ledger.connection_errors += 1

    async def cycle(self, session: aiohttp.ClientSession, base: str) -> None:
        await self.post(session, base, "events")
        await self.post(session, base, "cfm")
        for path in ("/rules/last_updated", "/rules/ids", "/rules/firewall"):
            await self.get(session, base, path)


class Fleet:
    def __init__(self, urls: list[str], routers: int, batch_records: int = 20,
                 pause_seconds: float = 0.5, max_requests: int = 10**7,
                 request_timeout: float = 30, first_mac: int = 0x0200_0000_0000):
        for url in urls:
            host = urlparse(url).hostname or ""
            if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
                raise ValueError(f"the fleet only talks to loopback addresses, not {url}")
        self.urls = urls
        self.records = corpus_records()
        self.batch_records = batch_records
        self.pause_seconds = pause_seconds
        self.max_requests = max_requests
        self.timeout = aiohttp.ClientTimeout(total=request_timeout)
        self.ledger = Ledger()
        self.routers = [Router(n + 1, _mac(first_mac + n), self) for n in range(routers)]
        self.ledger.macs = [router.mac for router in self.routers]
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, seconds: float) -> Ledger:
        """Run every router until `seconds` pass, stop() is called, or max_requests is hit."""
        deadline = time.monotonic() + seconds
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=self.timeout) as session:
            await asyncio.gather(*(self._drive(router, session, deadline)
                                   for router in self.routers))
        return self.ledger

    async def _drive(self, router: Router, session: aiohttp.ClientSession,
                     deadline: float) -> None:
        base = self.urls[router.number % len(self.urls)]
        await asyncio.sleep(router.rng.uniform(0, self.pause_seconds))  # routers start apart
        while (not self._stop.is_set() and time.monotonic() < deadline
               and self.ledger.requests < self.max_requests):
            self.ledger.requests += 5
            await router.cycle(session, base)
            await asyncio.sleep(router.rng.uniform(0.5, 1.5) * self.pause_seconds)


def _mac(number: int) -> str:
    digits = f"{number:012x}"
    return ":".join(digits[i:i + 2] for i in range(0, 12, 2))


@dataclass
class LedgerCheck:
    acknowledged_missing: int = 0
    duplicated: int = 0
    half_stored_requests: int = 0
    refused_but_stored: int = 0
    unknown_rows: int = 0
    stored_rows: int = 0

    @property
    def ok(self) -> bool:
        return not (self.acknowledged_missing or self.duplicated or self.half_stored_requests
                    or self.refused_but_stored or self.unknown_rows)


def check_ledger(location: DatabaseLocation, ledger: Ledger) -> LedgerCheck:
    """Compare the ledger with what the database holds for the fleet's routers (its records
    read back into temporary row tables, testkit/telemetry.py)."""
    check = LedgerCheck()
    conn = connect(location)
    try:
        with conn.cursor() as cur:
            load_record_tables(cur, location)
            for kind, table in TABLES.items():
                cur.execute(f"SELECT mac::text, (record->>'flow_id')::bigint, count(*) "
                            f"FROM {table} WHERE mac = ANY(%s::macaddr[]) GROUP BY 1, 2",
                            (ledger.macs,))
                stored = {(mac, flow_id): count for mac, flow_id, count in cur.fetchall()}
                check.stored_rows += sum(stored.values())
                check.duplicated += sum(1 for count in stored.values() if count > 1)
                expected = set()
                for mac, kinds in ledger.acknowledged.items():
                    for flow_id in kinds.get(kind, []):
                        expected.add((mac, flow_id))
                        check.acknowledged_missing += (mac, flow_id) not in stored
                for mac, request_kind, flow_ids in ledger.unanswered:
                    if request_kind != kind:
                        continue
                    present = sum((mac, flow_id) in stored for flow_id in flow_ids)
                    check.half_stored_requests += 0 < present < len(flow_ids)
                    expected.update((mac, flow_id) for flow_id in flow_ids)
                for mac, request_kind, flow_ids in ledger.refused:
                    if request_kind == kind:
                        check.refused_but_stored += any((mac, f) in stored for f in flow_ids)
                check.unknown_rows += sum(1 for key in stored if key not in expected)
    finally:
        conn.close()
    return check


def summary(ledger: Ledger, check: LedgerCheck, seconds: float) -> str:
    by_status = ", ".join(f"{path} {status}: {count}"
                          for (path, status), count in sorted(ledger.statuses.items()))
    return (f"{len(ledger.acknowledged)} routers, {sum(ledger.statuses.values())} answers in "
            f"{seconds:.1f}s ({sum(ledger.statuses.values()) / seconds:,.0f}/s), "
            f"{ledger.records_acknowledged} records acknowledged "
            f"({ledger.records_acknowledged / seconds:,.0f}/s), "
            f"{ledger.connection_errors} connection errors, {ledger.stored_unknown} answers "
            f"\"stored\": \"unknown\"\n"
            f"answers: {by_status}\n"
            f"ledger: {check.stored_rows} rows stored; missing acknowledged "
            f"{check.acknowledged_missing}, duplicated {check.duplicated}, half-stored "
            f"requests {check.half_stored_requests}, refused but stored "
            f"{check.refused_but_stored}, unknown rows {check.unknown_rows} -> "
            f"{'OK' if check.ok else 'FAILED'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--batch-records", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.5,
                        help="mean seconds between a router's cycles")
    parser.add_argument("--no-rules", action="store_true",
                        help="do not publish the corpus ruleset (rules polls answer 404)")
    args = parser.parse_args()
    with throwaway_database() as (location, workdir):
        settings = ({"RULE_GENERATION_ENABLED": "false"} if args.no_rules
                    else publish_corpus_ruleset(location, workdir))
        servers = [ServerRunner(location, workdir / f"host-{n}", **settings).start()
                   for n in range(args.servers)]
        try:
            fleet = Fleet([s.url for s in servers], args.routers, args.batch_records,
                          args.pause)
            started = time.monotonic()
            ledger = asyncio.run(fleet.run(args.seconds))
            elapsed = time.monotonic() - started
        finally:
            for server in servers:
                server.stop()
        check = check_ledger(location, ledger)
        print(summary(ledger, check, elapsed))
    return 0 if check.ok and not ledger.server_errors() else 1


if __name__ == "__main__":
    sys.exit(main())
