"""Generation benchmark: K routers with synthetic telemetry through the pool, 1 worker then 2.

    python -m bench.generation [--routers 300] [--workers 1 2]

Publishes the ET Open corpus ruleset (or --archive), creates K routers, each with 40 alerts
(sids drawn from the ruleset, external sources) and 200 flows, then for each worker count
generates every router the way the server's queue does: lease, telemetry summary read,
generation in the process pool, payloads and schedule written in one transaction. Prints
routers/s per worker count, the scaling ratio, and per-router latency p50/p99. Each pool is
warmed (ruleset loaded in every worker) before timing.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import orjson

from engine.ruleset import load_ruleset
from server.db.connect import connect
from server.db.lifecycle import open_database
from server.generation import sql as queue
from server.generation.service import GenerationConfig, generate_router, generation_pool
from server.jobs.preprocess import run_preprocess
from server.settings import load_settings
from testkit.corpus import CORPUS_ARCHIVE
from testkit.database import database_env, throwaway_database
from testkit.telemetry import store_uploads

DEFAULT_ARCHIVE = CORPUS_ARCHIVE
ALERTS_PER_ROUTER = 40
FLOWS_PER_ROUTER = 200
APPS = ["dns", "tls", "http", "ssh", "smb", "ntp", "quic"]
PORTS = [53, 443, 80, 22, 445, 123, 8080, 8443, 25, 3389]


def published_ruleset(location, workdir: Path, archive: Path):
    """Settings for `location` with `archive` published as the current ruleset, and that
    ruleset."""
    (workdir / "version.txt").write_text("bench")
    settings = load_settings({
        **database_env(location), "DATA_DIR": str(workdir),
        "DB_LOG_LEVEL": "error", "RULE_PREPROCESS_ARCHIVE_URL": archive.as_uri(),
        "RULE_PREPROCESS_VERSION_URL": (workdir / "version.txt").as_uri()},
        env_file=None)
    asyncio.run(run_preprocess(settings))
    return settings, load_ruleset((settings.rule_data_path / "current").resolve())


def router_macs(count: int) -> list[str]:
    return [f"02:42:{n >> 24 & 255:02x}:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}"
            for n in range(count)]


def fill_telemetry(location, macs: list[str], sids: list[int]) -> None:
    """Each router's alerts and flows stored as one upload each (chunks and summaries, as
    ingestion stores them), and its queue row."""
    rng = random.Random(1)
    events, flows = [], []
    received_at = datetime.now(timezone.utc)
    for mac in macs:
        events.append((mac, received_at, [orjson.dumps({
            "event_type": "alert", "src_ip": f"198.51.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
            "dest_ip": "192.168.1.10",
            "alert": {"signature_id": rng.choice(sids), "severity": rng.randint(1, 3)}})
            for _ in range(ALERTS_PER_ROUTER)]))
        flows.append((mac, received_at, [orjson.dumps({
            "event_type": "flow", "app_proto": rng.choice(APPS), "dest_port": rng.choice(PORTS)})
            for _ in range(FLOWS_PER_ROUTER)]))
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            store_uploads(cur, "events", events, 1_000)
            store_uploads(cur, "cfm", flows, 1_000)
            cur.executemany("INSERT INTO routers (mac) VALUES (%s)", [(m,) for m in macs])
            cur.executemany("INSERT INTO generation_queue (mac) VALUES (%s)",
                            [(m,) for m in macs])
    finally:
        conn.close()


def reset_queue(location) -> None:
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("UPDATE generation_queue SET next_due_at = now(), generated_at = NULL, "
                        "generation_count = 0, claimed_by = NULL, claimed_until = NULL")
            cur.execute("DELETE FROM router_rules")
    finally:
        conn.close()


async def run_round(settings, macs: list[str], workers: int) -> tuple[float, list[float]]:
    config = GenerationConfig.from_settings(settings)
    pool = generation_pool(workers, config.timeout)
    latencies: list[float] = []
    try:
        async with open_database(settings) as db:
            owner = f"bench-{workers}"

            async def generate(mac: str) -> None:  # claimed first, as the dispatcher does
                await queue.claim_router(db, owner, mac, config.one_off_lease)
                await generate_router(db, pool, config, owner, mac, config.one_off_lease)
            # Warm every worker: the ruleset is loaded once per process, before timing.
            await asyncio.gather(*(generate(mac) for mac in macs[:workers]))
            pending = list(reversed(macs[workers:]))

            async def worker() -> None:
                while pending:
                    mac = pending.pop()
                    started = time.perf_counter()
                    await generate(mac)
                    latencies.append(time.perf_counter() - started)

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(workers)))
            return time.perf_counter() - started, latencies
    finally:
        pool.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=300)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--archive", type=Path, default=DEFAULT_ARCHIVE)
    args = parser.parse_args()
    if not args.archive.exists():
        print(f"archive {args.archive} not found (pass --archive)", file=sys.stderr)
        return 2
    with throwaway_database() as (location, workdir):
        settings, ruleset = published_ruleset(location, workdir, args.archive)
        macs = router_macs(args.routers)
        fill_telemetry(location, macs, [r["sid"] for r in ruleset.rules])
        print(f"{args.routers} routers, ruleset {ruleset.version} ({len(ruleset.rules)} "
              f"eligible rules), {settings.rule_generation_sample_count} rules per router, "
              f"{ALERTS_PER_ROUTER} alerts and {FLOWS_PER_ROUTER} flows each")
        rates = {}
        for workers in args.workers:
            reset_queue(location)
            seconds, latencies = asyncio.run(run_round(settings, macs, workers))
            rates[workers] = len(latencies) / seconds
            quantiles = statistics.quantiles(latencies, n=100)
            print(f"{workers} worker(s): {rates[workers]:6.1f} routers/s, latency p50 "
                  f"{quantiles[49] * 1000:.0f} ms, p99 {quantiles[98] * 1000:.0f} ms")
        if len(args.workers) >= 2:
            low, high = args.workers[0], args.workers[-1]
            print(f"scaling {low} -> {high} workers: {rates[high] / rates[low]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
