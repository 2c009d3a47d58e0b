"""Hostile-client drill: the broken and hostile uploads of issue 13 against one live server,
while a watcher polls `/rules/last_updated` as another router.

    python -m bench.hostile [--stalls 25] [--scale 1.0]

Stalled uploads (each has written a batch inside its transaction, then stops sending) and a
client sending its headers a line at a time run in the background while the other cases run
one after another: CPU-heavy gzip and plain bodies, a gzip body of empty records, a poison
record among 10,000 good ones, 50,000 junk records, notifications with separators or
several recipients, two `X-ID` headers. Each case states the answer it expects. The drill
passes when every case got it, the watcher never saw anything but 200 and its worst latency
stayed under 1 s, no connection is left idle in a transaction, and the tables hold exactly
what the 200 answers acknowledged. The server runs with default settings unless told
otherwise (the quick version in tests/test_drills.py shortens the timeouts).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import io
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
from multidict import CIMultiDict

from bench.fleet import corpus_records
from server.db.location import DatabaseLocation
from testkit.telemetry import stored_count
from testkit.database import Sql, throwaway_database
from testkit.server import ServerRunner

# The server is reached as through the proxy (loopback is a trusted proxy by default), so
# watcher and attacker come from addresses of their own, as they would in production.
WATCHER = {"X-Forwarded-For": "198.51.100.7"}
ATTACKER = {"X-Forwarded-For": "203.0.113.66"}
# The watcher polls every 50 ms in turn as 16 routers: each stays under the default flood
# limit of 120 requests a minute, as a real router (polling every few minutes) does.
WATCHER_MACS = [f"02:00:00:00:0e:{n:02x}" for n in range(0x10, 0x20)]
STALLER_MAC = "02:00:00:00:0e:03"


def attacker_mac(case: int) -> str:
    """One router per upload case, so each case meets the flood limits on its own."""
    return f"02:00:00:00:0e:{0x40 + case:02x}"
WATCH_INTERVAL = 0.05
WORST_LATENCY_LIMIT = 1.0
STALL_BATCH_RECORDS = 2_100  # past INGEST_BATCH_ROWS' default: the transaction is open


@dataclass
class Case:
    name: str
    expected: int
    status: int | None = None
    seconds: float = 0.0
    accepted: int = 0

    @property
    def ok(self) -> bool:
        return self.status == self.expected


@dataclass
class HostileResult:
    cases: list[Case] = field(default_factory=list)
    polls: int = 0
    worst_latency: float = 0.0
    worst_at: float = 0.0
    non_200: dict[int | str, int] = field(default_factory=dict)
    idle_in_transaction_after: int = -1
    stored_rows: int = -1

    @property
    def acknowledged_rows(self) -> int:
        return sum(case.accepted for case in self.cases)

    @property
    def ok(self) -> bool:
        return (all(case.ok for case in self.cases) and not self.non_200
                and self.worst_latency < WORST_LATENCY_LIMIT and self.polls > 0
                and self.idle_in_transaction_after == 0
                and self.stored_rows == self.acknowledged_rows)

    def report(self) -> str:
        lines = [f"{'case':<62} {'expected':>8} {'got':>5} {'seconds':>8}"]
        lines += [f"{case.name:<62} {case.expected:>8} {case.status!s:>5} {case.seconds:>8.2f}"
                  f"{'' if case.ok else '   <-- wrong'}" for case in self.cases]
        lines.append(f"watcher: {self.polls} polls, worst latency "
                     f"{self.worst_latency * 1000:.0f} ms ({self.worst_at:.1f} s in), answers other than 200: "
                     f"{self.non_200 or 'none'}")
        lines.append(f"connections idle in transaction afterwards: "
                     f"{self.idle_in_transaction_after}; rows stored {self.stored_rows}, "
                     f"acknowledged {self.acknowledged_rows}")
        lines.append("PASSED" if self.ok else "FAILED")
        return "\n".join(lines)


class Watcher:
    """Another router polling while the attacks run: latency and status of every poll. It
    runs in a thread with its own event loop, so the drill's own work never delays it."""

    def __init__(self, url: str):
        self.url = f"{url}/rules/last_updated"
        self.polls = 0
        self.worst = 0.0
        self.worst_at = 0.0   # seconds after the watcher started
        self.non_200: dict[int | str, int] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        """Start, and return once a first poll (registering the router, opening the
        connection; not counted) was answered."""
        self._thread.start()
        self._ready.wait(60)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    async def _run(self) -> None:
        began = time.perf_counter()
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout, headers=WATCHER) as session:
            for mac in WATCHER_MACS:
                async with session.get(self.url, headers={"X-ID": mac}) as answer:
                    await answer.read()
            self._ready.set()
            while not self._stop.is_set():
                started = time.perf_counter()
                mac = WATCHER_MACS[self.polls % len(WATCHER_MACS)]
                try:
                    async with session.get(self.url, headers={"X-ID": mac}) as answer:
                        await answer.read()
                        status: int | str = answer.status
                except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                    status = type(error).__name__
                if time.perf_counter() - started > self.worst:
                    self.worst, self.worst_at = time.perf_counter() - started, started - began
                self.polls += 1
                if status != 200:
                    self.non_200[status] = self.non_200.get(status, 0) + 1
                await asyncio.sleep(WATCH_INTERVAL)


def _request_head(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: drill"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _read_status(reader: asyncio.StreamReader, timeout: float) -> int | None:
    """The status of the answer on a raw connection, or None when it closed without one."""
    try:
        line = await asyncio.wait_for(reader.readline(), timeout)
    except (asyncio.TimeoutError, ConnectionError):
        return None
    parts = line.split()
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None


async def stalled_upload(host: str, port: int, first_part: bytes, timeout: float,
                         mac: str = STALLER_MAC, address: str | None = None) -> int | None:
    """Announce a long body, send a batch's worth of it, then stop sending (as `mac`, from
    `address` through the trusted proxy; default: the attacker's)."""
    reader, writer = await asyncio.open_connection(host, port)
    origin = ATTACKER if address is None else {"X-Forwarded-For": address}
    writer.write(_request_head("/log/events", {
        "X-ID": mac, "Content-Type": "application/x-ndjson", **origin,
        "Content-Length": str(len(first_part) * 4)}) + first_part)
    await writer.drain()
    try:
        return await _read_status(reader, timeout)
    finally:
        writer.close()


async def slow_headers(host: str, port: int, line_pause: float, lines: int) -> int | str:
    """Send a header line every `line_pause` seconds; how the server ended it."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: drill\r\n")
        for number in range(lines):
            await asyncio.sleep(line_pause)
            if reader.at_eof():
                return 408  # closed before the head was complete: the expected outcome
            writer.write(f"X-Padding-{number}: slow\r\n".encode())
            await writer.drain()
        return "held"
    except ConnectionError:
        return 408
    finally:
        writer.close()


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, 9)


def _bodies(scale: float) -> dict[str, tuple[bytes, dict[str, str], int]]:
    """name -> (body, extra headers, expected status) for the sequential upload cases."""
    lines = [orjson.dumps(r) for r in corpus_records()["events"]]
    good = [lines[n % len(lines)] for n in range(10_000)]
    megabyte = 1024 * 1024
    gz = {"Content-Encoding": "gzip"}
    array = {"Content-Type": "application/json"}
    return {
        "10 KB of gzip: 10 MiB of commas inside a JSON array":
            (_gzip(b"[[" + b"," * int(10 * megabyte * scale) + b"]]"), {**gz, **array}, 413),
        "30 KB of gzip: 30 MiB of newlines":
            (_gzip(b"\n" * int(30 * megabyte * scale)), gz, 413),
        # one element, over the record size limit: nothing stored, so 422 (issue 54)
        f"{int(50 * scale)} MB of commas inside a JSON array, plain":
            (b"[[" + b"," * int(50 * 1000 * 1000 * scale) + b"]]", array, 422),
        "911 bytes of gzip: 300,000 empty records":
            (_gzip(b"{}\n" * 300_000), gz, 413),
        "one 1E-20000 among 10,000 good records":
            (b"\n".join(good[:5000] + [b'{"a": 1E-20000}'] + good[5000:]), {}, 200),
        "50,000 junk records":
            (b'{"event_type": "junk", "pad": 0}\n' * 50_000, {}, 200),
    }


async def _post(session: aiohttp.ClientSession, url: str, body: bytes,
                headers: dict[str, str] | CIMultiDict) -> tuple[int, dict]:
    # A file object: aiohttp warns that a large bytes body could block the loop.
    async with session.post(url, data=io.BytesIO(body), headers=headers) as answer:
        return answer.status, await answer.json(content_type=None)


async def upload_cases(session: aiohttp.ClientSession, url: str,
                       bodies: dict[str, tuple[bytes, dict[str, str], int]]) -> list[Case]:
    cases = []
    for number, (name, (body, extra, expected)) in enumerate(bodies.items()):
        headers = {"X-ID": attacker_mac(number), "Content-Type": "application/x-ndjson",
                   **ATTACKER, **extra}
        case, started = Case(name, expected), time.perf_counter()
        case.status, reply = await _post(session, f"{url}/log/events", body, headers)
        case.seconds = time.perf_counter() - started
        case.accepted = reply.get("accepted", 0) if case.status == 200 else 0
        cases.append(case)
    return cases


async def header_and_notification_cases(session: aiohttp.ClientSession,
                                        url: str) -> list[Case]:
    cases = []
    two_ids = CIMultiDict([("X-ID", attacker_mac(0)), ("X-ID", WATCHER_MACS[0]),
                           ("Content-Type", "application/x-ndjson")])
    probes = [
        ("two X-ID headers", f"{url}/log/events", b'{"event_type": "alert"}', two_ids),
        ('X-ID holding a quote', f"{url}/log/events", b'{"event_type": "alert"}',
         {"X-ID": 'aa" forged="1', "Content-Type": "application/x-ndjson"}),
    ]
    notify = f"{url}/api/notifications/vulsource-update"
    for label, fields in (("version number holding U+2028", {"versionNumber": "1\u20282"}),
                          ("recipient list evil,alice@example.org",
                           {"recipient": "evil,alice@example.org"}),
                          ('recipient "Bob"<bob>alice@example.org',
                           {"recipient": '"Bob"<bob>alice@example.org'})):
        body = {"userId": "drill", "recipient": "alice@example.org", "versionNumber": "1",
                **fields}
        probes.append((f"notification: {label}", notify, orjson.dumps(body),
                       {"Content-Type": "application/json"}))
    for name, target, body, headers in probes:
        case, started = Case(name, 400), time.perf_counter()
        case.status, _ = await _post(session, target, body, headers)
        case.seconds = time.perf_counter() - started
        cases.append(case)
    return cases


async def hostile(location: DatabaseLocation, workdir: Path, stalls: int = 25,
                  scale: float = 1.0, **settings: str) -> HostileResult:
    """Run every case against a fresh server on `location`; `settings` override defaults."""
    server = ServerRunner(location, workdir, flood_limits=True, RULE_GENERATION_ENABLED="false",
                          **settings)
    server.start()
    idle = int(server.env.get("INGEST_BODY_IDLE_SECONDS", "15"))
    header_idle = int(server.env.get("HTTP_IDLE_TIMEOUT_SECONDS", "15"))
    result = HostileResult()
    try:
        result.cases = await _attack(server.url, server.port, stalls, scale, idle, header_idle,
                                     result)
    finally:
        server.stop()
    sql = Sql(location)
    result.idle_in_transaction_after = sql.value(
        "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' "
        "AND datname = current_database()")
    result.stored_rows = stored_count(sql)
    return result


async def _attack(url: str, port: int, stalls: int, scale: float, idle: int,
                  header_idle: int, result: HostileResult) -> list[Case]:
    bodies = _bodies(scale)  # built before the clock starts
    lines = [orjson.dumps(r) for r in corpus_records()["events"]]
    stall_part = b"\n".join(lines[n % len(lines)] for n in range(STALL_BATCH_RECORDS)) + b"\n"
    watcher = Watcher(url)
    watcher.start()
    started = time.perf_counter()
    background = [asyncio.create_task(stalled_upload("127.0.0.1", port, stall_part, idle + 30))
                  for _ in range(stalls)]
    slow = asyncio.create_task(slow_headers("127.0.0.1", port, 1.0, header_idle + 10))
    timeout = aiohttp.ClientTimeout(total=300)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.sleep(0.5)  # the stalled uploads have sent their batch
            cases = await upload_cases(session, url, bodies)
            cases += await header_and_notification_cases(session, url)
        stalled = sorted(await asyncio.gather(*background), key=str)
        stall_seconds = time.perf_counter() - started
        # The router's first two uploads (INGEST_MAX_UPLOADS_PER_ROUTER) stall until cut off;
        # the others are refused at once.
        expected = [408] * min(stalls, 2) + [429] * max(stalls - 2, 0)
        cases.append(Case(f"{stalls} stalled uploads of one router (408 x2, 429 for the rest)",
                          408,
                          408 if stalled == expected else str(stalled), stall_seconds))
        cases.append(Case("headers sent a line a second", 408, await slow,
                          time.perf_counter() - started))
        await asyncio.sleep(0.5)  # the watcher keeps polling after the stalls were cut off
    finally:
        watcher.stop()
    result.polls, result.non_200 = watcher.polls, watcher.non_200
    result.worst_latency, result.worst_at = watcher.worst, watcher.worst_at
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stalls", type=int, default=25)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="size factor of the CPU-heavy bodies (1: the issue's sizes)")
    args = parser.parse_args()
    with throwaway_database() as (location, workdir):
        result = asyncio.run(hostile(location, workdir, args.stalls, args.scale))
    print(result.report())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
