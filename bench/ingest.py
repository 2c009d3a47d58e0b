"""Ingestion benchmark: EVE records over HTTP (NDJSON) versus PostgreSQL COPY of the same
records into a row table.

    python -m bench.ingest [--records 200000] [--per-request 10000] [--concurrency 1]
                               [--workers 1] [--body alerts|corpus] [--set NAME=VALUE]

Starts the real server (`python -m ops.cli serve`) as a subprocess on an embedded PostgreSQL
(or the server named by DB_HOST/DB_PORT/DB_USER/DB_PASSWORD), posts N records (stored in
compressed chunks with their hourly summaries), and in the same run COPYs the same records
with psycopg into `copy_reference (mac, received_at, record jsonb)` with a (mac,
received_at) index: one row per record, the least a row store does. Prints records/s of
both, their ratio, the same uploads with an Idempotency-Key per body against those without,
and the peak resident memory (VmHWM) of the serving process (each HTTP worker's with
--workers above 1: HTTP_WORKERS under the supervisor).

--body alerts (the default): the corpus's alerts, to /log/events. --body corpus: every record
of the corpus's EVE files that an endpoint reads, in their files' order and proportions
(alerts to /log/events; flows and DNS, TLS, HTTP and fileinfo records to /log/cfm), each
body one endpoint's. --set: a setting of the server's (repeatable), e.g.
HUNT_INDEX_SECONDS=3600 to measure ingestion with the hunt indexer idle.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from datetime import datetime, timezone

import aiohttp
import orjson

from bench.crash_drill import INDEX_TIMEOUT, await_indexed
from bench.fleet import CORPUS_EVE, FIXTURE_EVE, corpus_records
from server.db.connect import connect
from server.db.location import DatabaseLocation
from testkit.database import Sql, throwaway_database
from testkit.server import memory_kib, running_server
from testkit.telemetry import stored_count

MAC = "02:00:00:00:be:01"
HUNT_INDEX_SECONDS = 5  # the setting's default, which this benchmark runs with


# What each endpoint reads (server/telemetry/writer.py); the corpus's stats and DHCP
# records, which neither reads, are left out as the agent leaves them out.
ENDPOINT_OF = {"alert": "events", **{kind: "cfm" for kind in
                                     ("flow", "dns", "tls", "http", "fileinfo")}}


def corpus_mix() -> list[tuple[str, dict]]:
    """(endpoint, record) for every record of the corpus's EVE files an endpoint reads."""
    mix = []
    for path in sorted(CORPUS_EVE.glob("*.json")) or [FIXTURE_EVE]:
        for line in path.read_bytes().splitlines():
            record = orjson.loads(line) if line.strip() else {}
            if record.get("event_type") in ENDPOINT_OF:
                mix.append((ENDPOINT_OF[record["event_type"]], record))
    return mix


def make_lines(count: int, body: str = "alerts") -> list[tuple[str, bytes]]:
    """`count` records as (endpoint, NDJSON line), each with a flow_id of its own."""
    base = corpus_mix() if body == "corpus" else \
        [("events", record) for record in corpus_records()["events"]]
    lines = []
    for n in range(count):
        endpoint, record = base[n % len(base)]
        record = dict(record)
        record["flow_id"] = n
        record["src_port"] = 1024 + n % 60000
        lines.append((endpoint, orjson.dumps(record)))
    return lines


def ndjson_bodies(lines: list[tuple[str, bytes]], per_request: int
                  ) -> list[tuple[str, bytes]]:
    """(endpoint, body) of `per_request` records each, in the lines' order: a body is sent
    when its endpoint's records reach `per_request`, the rest at the end."""
    pending: dict[str, list[bytes]] = {}
    bodies = []
    for endpoint, line in lines:
        pending.setdefault(endpoint, []).append(line)
        if len(pending[endpoint]) == per_request:
            bodies.append((endpoint, b"\n".join(pending.pop(endpoint)) + b"\n"))
    bodies.extend((endpoint, b"\n".join(rest) + b"\n") for endpoint, rest in pending.items())
    return bodies


# The reference of the ingestion, storage and export benchmarks: the least a row store does,
# one row per record.
REFERENCE_TABLE = """CREATE TABLE IF NOT EXISTS copy_reference (
    mac macaddr NOT NULL, received_at timestamptz NOT NULL, record jsonb NOT NULL);
CREATE INDEX IF NOT EXISTS copy_reference_mac_idx ON copy_reference (mac, received_at)"""


def copy_text(lines: list[bytes], received_at: str, mac: str = MAC) -> bytes:
    """The same records, one row each, in COPY text format."""
    prefix = f"{mac}\t{received_at}\t".encode()
    return b"".join(prefix + line.replace(b"\\", b"\\\\") + b"\n" for line in lines)


def copy_rows(cur, data: bytes) -> None:
    """`data` (copy_text) into the reference table, made when missing."""
    cur.execute(REFERENCE_TABLE)
    with cur.copy("COPY copy_reference (mac, received_at, record) FROM STDIN") as copy:
        copy.write(data)


def run_copy(location: DatabaseLocation, data: bytes) -> float:
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(REFERENCE_TABLE)
        with conn.transaction(), conn.cursor() as cur:
            started = time.perf_counter()
            copy_rows(cur, data)
        return time.perf_counter() - started
    finally:
        conn.close()


async def run_http(port: int, bodies: list[tuple[str, bytes]], concurrency: int,
                   keys: dict[str, str] | None = None, batch_keys: str = "") -> float:
    """Each client is a router of its own (a router uploads one body at a time); `keys`:
    the routers' keys, for a server with ROUTER_AUTH=key; `batch_keys`: a prefix for an
    Idempotency-Key per body."""
    queue = list(reversed(list(enumerate(bodies))))

    async def worker(session: aiohttp.ClientSession, number: int) -> None:
        router = f"{MAC[:-2]}{number + 1:02x}"
        headers = {"X-ID": router, "Content-Type": "application/x-ndjson"}
        if keys:
            headers["Authorization"] = f"Bearer {keys[router]}"
        while queue:
            number, (endpoint, body) = queue.pop()
            sent = {**headers, "Idempotency-Key": f"{batch_keys}{number}"} if batch_keys \
                else headers
            async with session.post(f"http://127.0.0.1:{port}/log/{endpoint}", data=body,
                                    headers=sent) as response:
                reply = await response.json()
                if response.status != 200 or reply["rejected"]:
                    raise RuntimeError(f"server answered {response.status}: {reply}")

    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session, n) for n in range(concurrency)))
        return time.perf_counter() - started


# What a run writes; the hunt's tables are missing in a release before the hunt index (the
# other side of bench/ingest_pair.py).
WRITTEN = ("telemetry_chunks", "telemetry_alerts", "telemetry_flows", "copy_reference",
           "hunt_pending", "hunt_postings", "hunt_budgets")


def truncate(location: DatabaseLocation) -> None:
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(REFERENCE_TABLE)
            cur.execute("SELECT array_agg(name) FROM unnest(%s::text[]) AS name "
                        "WHERE to_regclass(name) IS NOT NULL", (list(WRITTEN),))
            cur.execute(f"TRUNCATE {', '.join(cur.fetchone()[0])}")
            cur.execute("CHECKPOINT")
    finally:
        conn.close()


def add_settings_option(parser: argparse.ArgumentParser, whose: str = "the server's") -> None:
    """--set NAME=VALUE, repeatable: `dict(args.set)` is the settings given."""
    parser.add_argument("--set", action="append", default=[], type=_name_value,
                        metavar="NAME=VALUE", help=f"a setting of {whose} (repeatable)")


def _name_value(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-request", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="HTTP_WORKERS")
    parser.add_argument("--body", choices=("alerts", "corpus"), default="alerts")
    add_settings_option(parser)
    args = parser.parse_args()
    settings = dict(args.set)

    lines = make_lines(args.records, args.body)
    bodies = ndjson_bodies(lines, args.per_request)
    copy_data = copy_text([line for _, line in lines],
                          datetime.now(timezone.utc).isoformat())
    megabytes = sum(len(body) for _, body in bodies) / 2**20
    kinds = Counter(endpoint for endpoint, _ in lines)
    print(f"{args.records} records ({args.body}: "
          f"{', '.join(f'{n} to /log/{kind}' for kind, n in sorted(kinds.items()))}), "
          f"{megabytes:.0f} MiB of NDJSON, "
          f"{len(bodies)} requests of {args.per_request}, concurrency {args.concurrency}, "
          f"{args.workers} HTTP worker(s)")

    with throwaway_database() as (location, workdir), \
            running_server(location, workdir,
                           **{"HTTP_WORKERS": str(args.workers), **settings}) as server:
        http_times, copy_times, keyed_times, index_times = [], [], [], []
        for round_number in range(args.rounds):
            truncate(location)
            copy_times.append(run_copy(location, copy_data))
            runs = [(http_times, ""), (keyed_times, f"r{round_number}-")]
            for times, batch_keys in runs[::1 if round_number % 2 else -1]:  # either first
                truncate(location)
                times.append(asyncio.run(run_http(server.port, bodies, args.concurrency,
                                                  batch_keys=batch_keys)))
                check_stored(location, kinds)
                if "HUNT_INDEX_SECONDS" not in settings:  # else the indexer may be idle
                    index_times.append(asyncio.run(await_indexed(location, INDEX_TIMEOUT)))
        http_rate, copy_rate = args.records / min(http_times), args.records / min(copy_times)
        keyed_rate = args.records / min(keyed_times)
        print(f"COPY:            {copy_rate:>10,.0f} records/s (best of {args.rounds})")
        print(f"HTTP NDJSON:     {http_rate:>10,.0f} records/s (best of {args.rounds})")
        print(f"ratio HTTP/COPY: {http_rate / copy_rate:.2f}")
        print(f"HTTP NDJSON with an Idempotency-Key per body: {keyed_rate:,.0f} records/s, "
              f"ratio keyed/unkeyed: {keyed_rate / http_rate:.2f}")
        if index_times:
            print(f"hunt indexer: every upload indexed {max(index_times):.1f} s after the "
                  f"last was answered at most (HUNT_INDEX_SECONDS {HUNT_INDEX_SECONDS}, the "
                  "indexer's turn every so often, in the same process)")
        serving = server.children("serving") if args.workers > 1 else [server.process.pid]
        peaks = ", ".join(f"{memory_kib(pid, 'VmHWM') / 1024:.0f}" for pid in serving)
        print(f"peak RSS of the serving process(es): {peaks} MiB")
    return 0


def count_rows(location: DatabaseLocation) -> int:
    return stored_count(Sql(location))


def check_stored(location: DatabaseLocation, kinds: dict[str, int]) -> None:
    """Every record stored: `kinds` the records sent to each endpoint."""
    for kind, records in kinds.items():
        stored = stored_count(Sql(location), kind)
        if stored != records:
            raise RuntimeError(f"stored {stored} {kind} records, expected {records}")


if __name__ == "__main__":
    sys.exit(main())
