"""Storage per router and per telemetry record, for sizing a fleet's disk.

    python -m bench.storage [--routers 1000] [--records 50000]

Publishes the ET Open corpus ruleset, registers --routers routers (each with 40 alerts and
200 flows, as in bench/generation.py) and generates every one through the generation pool,
twice: with plain rule files (`RULE_GENERATION_RULES_FILENAME={mac}.rules`, the layout before
this change: the reference) and with gzip-compressed ones (`{mac}.rules.gz`, the default).
Per router: the rule file on disk (allocated blocks), its `router_rules` row with both
payloads (TOAST and indexes included), its `generation_queue` and `routers` rows.

Per record: --records EVE records from the corpus (all its records, alerts to /log/events and
the rest to /log/cfm, repeated with flow ids, source ports, times and flow counters drawn
anew for each copy, so that no two are alike) uploaded by 10 routers every 10 seconds
through the service's own writer (server/db/telemetry.py: checks, summary, compressed chunk,
one transaction an upload), in bodies of 200 and of 2 records; then the compaction job. The
growth of the telemetry tables (chunks and hourly summaries, every partition, TOAST and
indexes included, after VACUUM) divided by the records, beside the same records COPYed
into a row table `(mac, received_at, record jsonb)` with a (mac, received_at) index, and
the bodies compressed with zstd alone.

Then the capacity profile (docs/performance.md), the agent's day: the same records from
routers sending 1,000 a day each in 2-record uploads spread evenly over a day (50 routers
for 50,000 records), the compaction job at every tenth of an hour of that day as it is
scheduled, and once after the day's partition closed. Its chunks' and summaries' bytes a
record are the figures of the disk formula printed last.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import zstandard

from engine.ruleset import load_ruleset
from bench.generation import fill_telemetry, run_round
from bench.ingest import copy_rows, copy_text
from server.db.connect import connect
from server.db.partitions import (LIST_PARTITIONS, TELEMETRY_TABLES, Partition,
                                  partitions_from_rows)
from server.db.pool import Database
from server.jobs.activation_days import DETAIL_DAYS
from server.jobs.preprocess import run_preprocess
from server.hunt.sql import UNREAD_UPLOAD
from server.telemetry.compaction import FLEET_WINDOW, compact
from server.hunt.budget import HuntBudget
from server.hunt.indexer import index_pending
from server.hunt.postings import POSTINGS_PER_ROUTER_DAY, PendingUpload
from server.telemetry.writer import TelemetryWriter
from server.settings import Settings, load_settings
from testkit import CORPUS
from testkit.corpus import CORPUS_ARCHIVE
from testkit.database import database_env, throwaway_database

LAYOUTS = {"plain rule files (before)": "{mac}.rules",
           "gzip rule files (default)": "{mac}.rules.gz"}
ROUTER_TABLES = ("router_rules", "generation_queue", "routers")
BUDGET_BYTES = 150 * 1024  # per router, issue 15


@dataclass
class RouterFootprint:
    routers: int
    files: int                # bytes allocated on disk
    tables: dict[str, int]    # bytes, relation + TOAST + indexes

    @property
    def per_router(self) -> float:
        return (self.files + sum(self.tables.values())) / self.routers

    def describe(self) -> str:
        parts = ", ".join(f"{name} {size / self.routers / 1024:.1f}"
                          for name, size in self.tables.items())
        return (f"{self.per_router / 1024:6.1f} KiB per router (rule file "
                f"{self.files / self.routers / 1024:.1f}, {parts})")


def total_size(cur, table: str) -> int:
    """Table, TOAST and indexes; of every partition for a partitioned table."""
    cur.execute("SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) "
                "FROM pg_partition_tree(%(table)s)), pg_total_relation_size(%(table)s))",
                {"table": table})
    return int(cur.fetchone()[0])


def allocated_bytes(folder: Path) -> int:
    return sum(entry.stat().st_blocks * 512 for entry in folder.iterdir() if entry.is_file())


def reset(location, idps_rules: Path) -> None:
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("TRUNCATE router_rules")
            cur.execute("UPDATE generation_queue SET next_due_at = now(), generated_at = NULL, "
                        "generation_count = 0, claimed_by = NULL, claimed_until = NULL")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("VACUUM FULL generation_queue")
    finally:
        conn.close()
    shutil.rmtree(idps_rules, ignore_errors=True)
    idps_rules.mkdir(parents=True)


def router_footprint(settings: Settings, location, macs: list[str]) -> RouterFootprint:
    idps_rules = settings.rule_data_path / "idps_rules"
    reset(location, idps_rules)
    asyncio.run(run_round(settings, macs, workers=2))
    conn = connect(location)
    try:
        with conn.cursor() as cur:
            tables = {table: total_size(cur, table) for table in ROUTER_TABLES}
    finally:
        conn.close()
    return RouterFootprint(len(macs), allocated_bytes(idps_rules), tables)


ROUTERS = 10
BODY_SIZES = (200, 2)
UPLOAD_SECONDS = 10


def corpus_lines() -> list[bytes]:
    return [line for path in sorted((CORPUS / "eve").glob("*.json"))
            for line in path.read_bytes().splitlines() if line.strip()]


def variant(record: dict, copy: int, rng: random.Random) -> dict:
    """The record as another sensor-day would have sent it: its flow id, source port, time
    and flow counters drawn anew (the first copy is the corpus as it is)."""
    if copy == 0:
        return record
    record = dict(record)
    if "flow_id" in record:
        record["flow_id"] = rng.randrange(10**14, 10**16)
    if isinstance(record.get("src_port"), int) and record["src_port"] > 1023:
        record["src_port"] = rng.randrange(1024, 65536)
    if "timestamp" in record:
        moment = datetime.fromisoformat(record["timestamp"])
        moment += timedelta(days=copy, microseconds=rng.randrange(10**6))
        record["timestamp"] = moment.strftime("%Y-%m-%dT%H:%M:%S.%f%z")
    if isinstance(record.get("flow"), dict):
        record["flow"] = {key: rng.randrange(1, 2 * value + 2)
                          if key.startswith(("pkts_", "bytes_")) and isinstance(value, int)
                          else value for key, value in record["flow"].items()}
    return record


def record_stream(count: int) -> list[tuple[str, bytes]]:
    """(kind, line) for `count` records: alerts are events, the rest CFM records; the first
    copy of the corpus as its lines are, the others as variants."""
    rng = random.Random(32)
    lines = corpus_lines()
    corpus = [orjson.loads(line) for line in lines]
    out = []
    for n in range(count):
        copy, position = divmod(n, len(corpus))
        record = corpus[position]
        kind = "events" if record.get("event_type") == "alert" else "cfm"
        out.append((kind, lines[position] if copy == 0
                    else orjson.dumps(variant(record, copy, rng))))
    return out


def uploads_of(stream: list[tuple[str, bytes]], body: int) -> list[tuple[str, str, list]]:
    """Routers' uploads in the order they arrive: the stream dealt round the routers a body
    at a time, each router's records split by kind as the reference agent sends them."""
    uploads = []
    for start in range(0, len(stream), body):
        mac = f"02:32:00:00:00:{(start // body) % ROUTERS:02x}"
        piece = stream[start:start + body]
        for kind in ("events", "cfm"):
            lines = [line for record_kind, line in piece if record_kind == kind]
            if lines:
                uploads.append((mac, kind, lines))
    return uploads


def telemetry_bytes(cur) -> dict[str, int]:
    return {table: total_size(cur, table) for table in TELEMETRY_TABLES}


def vacuumed_sizes(cur, full: bool = False) -> dict[str, int]:
    for table in TELEMETRY_TABLES:
        cur.execute(f"VACUUM {'FULL ' if full else ''}ANALYZE {table}")
    return telemetry_bytes(cur)


@dataclass
class RecordFootprint:
    records: int
    row_table: float          # bytes per record, COPY into the row table
    zstd_alone: dict = field(default_factory=dict)  # body size -> bytes per record
    # body size -> {table: bytes}: after the uploads (VACUUM); after the compaction job
    # (VACUUM); then with the space it freed given back (VACUUM FULL); and with the job run
    # ROUNDS times along the uploads, the freed space filled by the next ones (VACUUM).
    uploaded: dict = field(default_factory=dict)
    merged: dict = field(default_factory=dict)
    packed: dict = field(default_factory=dict)
    in_rounds: dict = field(default_factory=dict)
    # {table: bytes} of the agent's day (agent_day): the capacity profile, once the fleet
    # job's window no longer reaches it (its alert summaries packed too), once closed (its
    # chunks rewritten, its flow summaries packed) and while it was still open
    agent_day: dict = field(default_factory=dict)
    agent_closed_day: dict = field(default_factory=dict)
    agent_open_day: dict = field(default_factory=dict)

    def split(self, sizes: dict) -> tuple[float, float]:
        """Bytes a record of the chunks and of the rest (the summaries)."""
        chunks = sizes["telemetry_chunks"] / self.records
        return chunks, sum(sizes.values()) / self.records - chunks

    def line(self, sizes: dict) -> str:
        chunks, summaries = self.split(sizes)
        return (f"{chunks + summaries:6.0f} bytes a record (chunks {chunks:.0f}, "
                f"summaries {summaries:.0f})")


ROUNDS = 48  # the job runs 144 times a day at the defaults; each run frees what the next fills


def record_footprint(location, records: int) -> RecordFootprint:
    stream = record_stream(records)
    footprint = RecordFootprint(records, row_table_bytes(location, stream))
    # Yesterday (UTC): every simulated upload settled, whatever the hour of the run.
    start = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=0, minute=0, second=0,
                                                                     microsecond=0)
    conn = connect(location, autocommit=True)
    try:
        with conn.cursor() as cur:
            for body in BODY_SIZES:
                uploads = uploads_of(stream, body)
                footprint.zstd_alone[body] = sum(
                    len(zstandard.ZstdCompressor(level=3).compress(b"\n".join(lines)))
                    for _, _, lines in uploads) / records
                timed = [(start + timedelta(seconds=UPLOAD_SECONDS * (n // ROUTERS // 2)),
                          upload) for n, upload in enumerate(uploads)]
                empty = emptied(cur)
                asyncio.run(_store(location, timed, 1))
                footprint.uploaded[body] = growth(cur, empty)
                asyncio.run(_store(location, [], 1))
                footprint.merged[body] = growth(cur, empty)
                footprint.packed[body] = growth(cur, empty, full=True)
                empty = emptied(cur)
                asyncio.run(_store(location, timed, ROUNDS, cur))
                footprint.in_rounds[body] = growth(cur, empty)
            empty = emptied(cur)
            day = first_day_partition(cur)
            footprint.agent_open_day, footprint.agent_closed_day = asyncio.run(
                _store_a_day(location, agent_day(stream, day.start), day, cur, empty))
            footprint.agent_day = growth(cur, empty)
    finally:
        conn.close()
    return footprint


AGENT_RECORDS_A_DAY = 1_000  # a router's, in the capacity profile (docs/performance.md)
AGENT_BODY = 2
JOB_RUNS_A_DAY = 144  # TELEMETRY_COMPACT_CRON_SCHEDULE's default: every 10 minutes


def agent_day(stream: list[tuple[str, bytes]], start: datetime
              ) -> list[tuple[datetime, tuple[str, str, list]]]:
    """The records as routers sending AGENT_RECORDS_A_DAY a day each in AGENT_BODY-record
    uploads, spread evenly over the day from `start`: (receive time, upload), in time order."""
    routers = max(1, len(stream) // AGENT_RECORDS_A_DAY)
    interval = 86_400 * AGENT_BODY / AGENT_RECORDS_A_DAY
    timed = []
    for n, first in enumerate(range(0, len(stream), AGENT_BODY)):
        router, nth = n % routers, n // routers
        moment = start + timedelta(seconds=interval * (nth + router / routers))
        piece = stream[first:first + AGENT_BODY]
        for kind in ("events", "cfm"):
            if lines := [line for record_kind, line in piece if record_kind == kind]:
                timed.append((moment, (f"02:33:00:00:{router >> 8:02x}:{router & 255:02x}",
                                       kind, lines)))
    return timed


def first_day_partition(cur) -> Partition:
    """The first day partition made ahead: the day simulated there is one of the service's
    days (the partition before it, migration 0014's, covers all the past)."""
    cur.execute(LIST_PARTITIONS, {"table": "telemetry_chunks"})
    return min((partition for partition in partitions_from_rows(cur.fetchall())
                if partition.start is not None), key=lambda partition: partition.start)


async def _store_a_day(location, timed: list, day: Partition, cur, empty: dict[str, int]
                       ) -> tuple[dict[str, int], dict[str, int]]:
    """The day's uploads (in `day`) through the service's writer, the job at each tenth of
    an hour of it (with a VACUUM, as autovacuum would), then once after the day's partition
    closed (the first run past midnight, which takes the last uploads), and once past the
    fleet job's window; the tables' growth from `empty` before the first of those (the day
    still open) and after it (closed)."""
    db = await Database.open(location, 1, 4, 60)
    try:
        period = timedelta(days=1) / JOB_RUNS_A_DAY
        run_at = day.start + period
        for received_at, upload in timed:
            while received_at >= run_at:
                await _job(db, cur, run_at)
                run_at += period
            await write_upload(db, received_at, upload)
        still_open = await asyncio.to_thread(growth, cur, empty)
        rewrites = await _job(db, cur, max(day.end + period, run_at))  # past SUMMARY_SETTLE
        closed = await asyncio.to_thread(growth, cur, empty)
        rewrites += await _job(db, cur, day.end + FLEET_WINDOW + timedelta(hours=1, minutes=10))
        print(f"the agent's day: its chunks' partition rewritten {rewrites} time(s) once closed")
        return still_open, closed
    finally:
        await db.close()


async def write_upload(db: Database, received_at: datetime,
                       upload: tuple[str, str, list]) -> None:
    """One upload (mac, kind, lines) through the service's writer, received at `received_at`."""
    mac, kind, lines = upload
    async with TelemetryWriter(db, mac, kind, received_at, 2_000,
                               announce=PendingUpload()) as writer:
        for line in lines:
            if writer.add(line):
                await writer.flush()
        await writer.commit()


async def _job(db: Database, cur=None, now: datetime | None = None) -> int:
    """The compaction job as the service runs it at `now` (the hunt indexer first, as its
    loop does), then, in `cur`, a VACUUM as autovacuum would; the closed days it rewrote."""
    await index_pending(db, HuntBudget(POSTINGS_PER_ROUTER_DAY))
    report = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, everything=True, now=now)
    if cur is not None:
        await asyncio.to_thread(vacuumed_sizes, cur)
    return sum(rewrite["swapped"] for rewrite in report.rewritten)


def emptied(cur) -> dict[str, int]:
    cur.execute(f"TRUNCATE {', '.join(TELEMETRY_TABLES)}")
    return vacuumed_sizes(cur)


def growth(cur, empty: dict[str, int], full: bool = False) -> dict[str, int]:
    return {table: size - empty[table] for table, size in vacuumed_sizes(cur, full).items()}


async def _store(location, timed: list, rounds: int, cur=None) -> None:
    """Store the uploads through the service's writer, running the compaction job after each
    of `rounds` parts (with a VACUUM, as autovacuum would, in `cur`); with no uploads, run
    the job once."""
    db = await Database.open(location, 1, 4, 60)
    part = -(-len(timed) // rounds) if timed else 0
    try:
        for first in range(0, len(timed), part) if timed else ():
            for received_at, upload in timed[first:first + part]:
                await write_upload(db, received_at, upload)
            if rounds > 1:
                await _job(db, cur)
        if not timed:
            await _job(db)
    finally:
        await db.close()


def row_table_bytes(location, stream: list[tuple[str, bytes]]) -> float:
    """Bytes per record of the same records in the ingestion benchmark's reference table."""
    conn = connect(location, autocommit=True)
    try:
        with conn.cursor() as cur:
            copy_rows(cur, copy_text([line for _, line in stream], "2026-11-24T00:00:00Z"))
            cur.execute("VACUUM ANALYZE copy_reference")
            size = total_size(cur, "copy_reference")
            cur.execute("DROP TABLE copy_reference")
            return size / len(stream)
    finally:
        conn.close()


def activation_footprint(cur, activations: int) -> float:
    """Bytes per activation (one per /rules/last_updated call, with the caller's address),
    spread over 1,000 routers as the service writes them."""
    before = total_size(cur, "activations")
    cur.execute("INSERT INTO activations (mac, address) "
                "SELECT ('02:44:00:00:' || lpad(to_hex((n %% 1000) >> 8), 2, '0') || ':' || "
                "lpad(to_hex((n %% 1000) & 255), 2, '0'))::macaddr, '203.0.113.7' "
                "FROM generate_series(1, %s) n", (activations,))
    cur.execute("VACUUM ANALYZE activations")
    return (total_size(cur, "activations") - before) / activations


def rolled_day_footprint(cur, routers: int = 1_000, days: int = 30) -> float:
    """Bytes per router and day of activations rolled up (one address a day), as the
    activation-days job writes them."""
    before = total_size(cur, "activation_days")
    cur.execute("INSERT INTO activation_days (mac, day, address, activations, first_seen, "
                "last_seen) SELECT ('02:45:00:00:' || lpad(to_hex(r >> 8), 2, '0') || ':' || "
                "lpad(to_hex(r & 255), 2, '0'))::macaddr, d, '203.0.113.7', 288, d, "
                "d + interval '23 hours' FROM generate_series(0, %s - 1) r, "
                "generate_series(date_trunc('day', now(), 'UTC') - %s * interval '1 day', "
                "date_trunc('day', now(), 'UTC') - interval '1 day', interval '1 day') d",
                (routers, days))
    cur.execute("VACUUM ANALYZE activation_days")
    return (total_size(cur, "activation_days") - before) / (routers * days)


def measure(routers: int, records: int
            ) -> tuple[dict[str, RouterFootprint], RecordFootprint, tuple[float, float]]:
    with throwaway_database() as (location, workdir):
        (workdir / "version.txt").write_text("bench")
        base = {**database_env(location), "DATA_DIR": str(workdir), "DB_LOG_LEVEL": "error",
                "RULE_PREPROCESS_ARCHIVE_URL": CORPUS_ARCHIVE.as_uri(),
                "RULE_PREPROCESS_VERSION_URL": (workdir / "version.txt").as_uri()}
        settings = load_settings(base, env_file=None)
        asyncio.run(run_preprocess(settings))
        ruleset = load_ruleset((settings.rule_data_path / "current").resolve())
        macs = [f"02:43:00:00:{n >> 8 & 255:02x}:{n & 255:02x}" for n in range(routers)]
        fill_telemetry(location, macs, [rule["sid"] for rule in ruleset.rules])
        footprints = {
            name: router_footprint(load_settings(
                {**base, "RULE_GENERATION_RULES_FILENAME": filename}, env_file=None),
                location, macs)
            for name, filename in LAYOUTS.items()}
        conn = connect(location, autocommit=True)
        try:
            with conn.cursor() as cur:
                activation = (activation_footprint(cur, records), rolled_day_footprint(cur))
        finally:
            conn.close()
        return footprints, record_footprint(location, records), activation


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=1_000)
    parser.add_argument("--records", type=int, default=50_000)
    args = parser.parse_args()
    footprints, per_record, activation = measure(args.routers, args.records)
    for name, footprint in footprints.items():
        print(f"{name:27} {footprint.describe()}")
    before, after = footprints.values()
    verdict = "met" if after.per_router <= BUDGET_BYTES else "NOT met"
    print(f"per router: {after.per_router / before.per_router:.2f}x of before; "
          f"budget {BUDGET_BYTES // 1024} KiB: {verdict}")
    print(f"per record, {args.records:,} records from {ROUTERS} routers (indexes, TOAST and "
          f"summaries included, after VACUUM):")
    print(f"  row table, COPY (reference):            {per_record.row_table:6.0f} bytes a record")
    for body in BODY_SIZES:
        print(f"  {body:3}-record uploads, as stored:          "
              f"{per_record.line(per_record.uploaded[body])}")
        print(f"  {body:3}-record uploads, then the job:       "
              f"{per_record.line(per_record.merged[body])}")
        print(f"  {body:3}-record uploads, then VACUUM FULL:   "
              f"{per_record.line(per_record.packed[body])}")
        in_rounds = sum(per_record.in_rounds[body].values()) / args.records
        print(f"  {body:3}-record uploads, the job run {ROUNDS} times along: "
              f"{per_record.line(per_record.in_rounds[body])}: "
              f"{per_record.row_table / in_rounds:.1f}x denser than the row table; each "
              f"body zstd-compressed alone: {per_record.zstd_alone[body]:.0f}")
    day = per_record.agent_day
    print(f"  the agent's day ({AGENT_RECORDS_A_DAY:,} records a router in "
          f"{AGENT_BODY}-record uploads over a day, {args.records // AGENT_RECORDS_A_DAY} "
          f"routers, the job every {86_400 // JOB_RUNS_A_DAY // 60} minutes and once after "
          f"the day), past the fleet job's window (every summary packed): "
          f"{per_record.line(day)}; closed (its chunks rewritten, its flow summaries packed): "
          f"{per_record.line(per_record.agent_closed_day)}; open: "
          f"{per_record.line(per_record.agent_open_day)}")
    one, rolled = activation
    detail_days = DETAIL_DAYS + 1  # today's besides, until the job's first run past midnight
    print(f"per activation: {one:.0f} bytes, kept one by one for at most {detail_days} "
          f"day(s) (today's and {DETAIL_DAYS} before); then "
          f"{rolled:.0f} bytes per router and day")
    chunks, summaries = per_record.split(day)
    _, closed_summaries = per_record.split(per_record.agent_closed_day)
    opened_chunks, open_summaries = per_record.split(per_record.agent_open_day)
    print(f"disk for N routers sending R records a day kept D days, their summaries S days "
          f"(a week and an hour at the defaults: RETENTION_DAYS; the open day's as rows, "
          f"yesterday's alerts as rows), polling P times a day with activations kept A days: "
          f"N x {after.per_router / 1024:.0f} KiB "
          f"+ N x R x (D x ~{chunks:.0f} + ~{opened_chunks - chunks:.0f} "
          f"+ (S - 2) x ~{summaries:.0f} "
          f"+ ~{closed_summaries:.0f} + ~{open_summaries:.0f}) bytes "
          f"+ N x P x {detail_days} x ~{one:.0f} bytes + N x A x ~{rolled:.0f} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
