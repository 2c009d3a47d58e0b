"""Ingestion benchmark: EVE records over HTTP (NDJSON) versus PostgreSQL COPY of the same
records into a row table.

    python -m ops.bench.ingest [--records 200000] [--per-request 10000] [--concurrency 1]
                               [--workers 1]

Starts the real server (`python -m ops.cli serve`) as a subprocess on an embedded PostgreSQL
(or the server named by DB_HOST/DB_PORT/DB_USER/DB_PASSWORD), posts N records (stored in
compressed chunks with their hourly summaries), and in the same run COPYs the same records
with psycopg into `copy_reference (mac, received_at, record jsonb)` with a (mac,
received_at) index: one row per record, the least a row store does. Prints records/s of
both, their ratio, the same uploads with an Idempotency-Key per body against those without,
and the peak resident memory (VmHWM) of the serving process (each HTTP worker's with
--workers above 1: HTTP_WORKERS under the supervisor).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import datetime, timezone

import aiohttp
import orjson

from ops.bench.crash_drill import INDEX_TIMEOUT, await_indexed
from ops.bench.fleet import corpus_records
from server.db.connect import connect
from server.db.location import DatabaseLocation
from testkit.database import Sql, throwaway_database
from testkit.server import memory_kib, running_server
from testkit.telemetry import stored_count

MAC = "02:00:00:00:be:01"
HUNT_INDEX_SECONDS = 5  # the setting's default, which this benchmark runs with


def make_lines(count: int) -> list[bytes]:
    base = corpus_records()["events"]
    lines = []
    for n in range(count):
        record = dict(base[n % len(base)])
        record["flow_id"] = n
        record["src_port"] = 1024 + n % 60000
        lines.append(orjson.dumps(record))
    return lines


def ndjson_bodies(lines: list[bytes], per_request: int) -> list[bytes]:
    return [b"\n".join(lines[i:i + per_request]) + b"\n"
            for i in range(0, len(lines), per_request)]


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


async def run_http(port: int, bodies: list[bytes], concurrency: int,
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
            number, body = queue.pop()
            sent = {**headers, "Idempotency-Key": f"{batch_keys}{number}"} if batch_keys \
                else headers
            async with session.post(f"http://127.0.0.1:{port}/log/events", data=body,
                                    headers=sent) as response:
                reply = await response.json()
                if response.status != 200 or reply["rejected"]:
                    raise RuntimeError(f"server answered {response.status}: {reply}")

    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session, n) for n in range(concurrency)))
        return time.perf_counter() - started


def truncate(location: DatabaseLocation) -> None:
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(REFERENCE_TABLE)
            cur.execute("TRUNCATE telemetry_chunks, telemetry_alerts, telemetry_flows, "
                        "copy_reference, hunt_pending, hunt_postings, hunt_budgets")
            cur.execute("CHECKPOINT")
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-request", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="HTTP_WORKERS")
    args = parser.parse_args()

    lines = make_lines(args.records)
    bodies = ndjson_bodies(lines, args.per_request)
    copy_data = copy_text(lines, datetime.now(timezone.utc).isoformat())
    megabytes = sum(map(len, bodies)) / 2**20
    print(f"{args.records} alert records, {megabytes:.0f} MiB of NDJSON, "
          f"{len(bodies)} requests of {args.per_request}, concurrency {args.concurrency}, "
          f"{args.workers} HTTP worker(s)")

    with throwaway_database() as (location, workdir), \
            running_server(location, workdir, HTTP_WORKERS=str(args.workers)) as server:
        http_times, copy_times, keyed_times, index_times = [], [], [], []
        for round_number in range(args.rounds):
            truncate(location)
            copy_times.append(run_copy(location, copy_data))
            runs = [(http_times, ""), (keyed_times, f"r{round_number}-")]
            for times, batch_keys in runs[::1 if round_number % 2 else -1]:  # either first
                truncate(location)
                times.append(asyncio.run(run_http(server.port, bodies, args.concurrency,
                                                  batch_keys=batch_keys)))
                check_stored(location, args.records)
                index_times.append(asyncio.run(await_indexed(location, INDEX_TIMEOUT)))
        http_rate, copy_rate = args.records / min(http_times), args.records / min(copy_times)
        keyed_rate = args.records / min(keyed_times)
        print(f"COPY:            {copy_rate:>10,.0f} records/s (best of {args.rounds})")
        print(f"HTTP NDJSON:     {http_rate:>10,.0f} records/s (best of {args.rounds})")
        print(f"ratio HTTP/COPY: {http_rate / copy_rate:.2f}")
        print(f"HTTP NDJSON with an Idempotency-Key per body: {keyed_rate:,.0f} records/s, "
              f"ratio keyed/unkeyed: {keyed_rate / http_rate:.2f}")
        print(f"hunt indexer: every upload indexed {max(index_times):.1f} s after the last "
              f"was answered at most (HUNT_INDEX_SECONDS {HUNT_INDEX_SECONDS}, the indexer's "
              "turn every so often, in the same process)")
        serving = server.children("serving") if args.workers > 1 else [server.process.pid]
        peaks = ", ".join(f"{memory_kib(pid, 'VmHWM') / 1024:.0f}" for pid in serving)
        print(f"peak RSS of the serving process(es): {peaks} MiB")
    return 0


def count_rows(location: DatabaseLocation) -> int:
    return stored_count(Sql(location))


def check_stored(location: DatabaseLocation, records: int) -> None:
    stored = count_rows(location)
    if stored != records:
        raise RuntimeError(f"stored {stored} records, expected {records}")


if __name__ == "__main__":
    sys.exit(main())
