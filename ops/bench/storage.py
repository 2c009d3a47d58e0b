"""Storage per router and per telemetry record, for sizing a fleet's disk.

    python -m ops.bench.storage [--routers 1000] [--records 50000]

Publishes the ET Open corpus ruleset, registers --routers routers (each with 40 alerts and
200 flows, as in ops/bench/generation.py) and generates every one through the generation pool,
twice: with plain rule files (`RULE_GENERATION_RULES_FILENAME={mac}.rules`, the layout before
this change: the reference) and with gzip-compressed ones (`{mac}.rules.gz`, the default).
Per router: the rule file on disk (allocated blocks), its `router_rules` row with both
payloads (TOAST and indexes included), its `generation_queue` and `routers` rows.

Per record: the corpus's real EVE alerts and flows inserted --records times each with the
service's batched INSERT; the growth of ids_events and cfm_records (every partition, TOAST
and index included) divided by the records.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson
import psycopg2

from engine.ruleset import load_ruleset
from ops.bench.generation import fill_telemetry, run_round
from server.db.schema import cfm_records, ids_events
from server.db.telemetry import insert_statement
from server.ingest.extract import CFM_COLUMNS, EVENT_COLUMNS, cfm_row, encode_row, event_row
from server.jobs.preprocess import run_preprocess
from server.settings import Settings, load_settings
from testkit import CORPUS
from testkit.corpus import CORPUS_ARCHIVE
from testkit.database import database_env, throwaway_database

LAYOUTS = {"plain rule files (before)": "{mac}.rules",
           "gzip rule files (default)": "{mac}.rules.gz"}
ROUTER_TABLES = ("router_rules", "generation_queue", "routers")
INSERT_BATCH = 2_000
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
    conn = psycopg2.connect(**location.connect_kwargs())
    try:
        with conn, conn.cursor() as cur:
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
    conn = psycopg2.connect(**location.connect_kwargs())
    try:
        with conn.cursor() as cur:
            tables = {table: total_size(cur, table) for table in ROUTER_TABLES}
    finally:
        conn.close()
    return RouterFootprint(len(macs), allocated_bytes(idps_rules), tables)


def corpus_rows() -> dict[str, list[bytes]]:
    rows = {"alert": [], "flow": []}
    for path in sorted((CORPUS / "eve").glob("*.json")):
        for line in path.read_bytes().splitlines():
            kind = orjson.loads(line).get("event_type") if line.strip() else None
            if kind in rows:
                rows[kind].append(encode_row(line, event_row if kind == "alert" else cfm_row))
    return rows


def record_footprint(location, records: int) -> dict[str, float]:
    """Bytes per stored record: alerts in ids_events, flows in cfm_records."""
    rows = corpus_rows()
    targets = {"alert": (ids_events, EVENT_COLUMNS), "flow": (cfm_records, CFM_COLUMNS)}
    conn = psycopg2.connect(**location.connect_kwargs())
    conn.autocommit = True
    footprint = {}
    try:
        with conn.cursor() as cur:
            for kind, (table, columns) in targets.items():
                statement = insert_statement(table, columns)
                before = total_size(cur, table.name)
                sample = [rows[kind][n % len(rows[kind])] for n in range(records)]
                for first in range(0, records, INSERT_BATCH):
                    batch = b"[" + b",".join(sample[first:first + INSERT_BATCH]) + b"]"
                    cur.execute(statement, {"mac": "02:00:00:00:00:01",
                                            "received_at": "now", "rows": batch.decode()})
                cur.execute(f"VACUUM ANALYZE {table.name}")
                footprint[kind] = (total_size(cur, table.name) - before) / records
            footprint["activation"] = activation_footprint(cur, records)
    finally:
        conn.close()
    return footprint


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


def measure(routers: int, records: int) -> tuple[dict[str, RouterFootprint], dict[str, float]]:
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
        return footprints, record_footprint(location, records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=1_000)
    parser.add_argument("--records", type=int, default=50_000)
    args = parser.parse_args()
    if not CORPUS_ARCHIVE.exists() or not (CORPUS / "eve").is_dir():
        print(f"the corpus ({CORPUS}) is needed", file=sys.stderr)
        return 2
    footprints, per_record = measure(args.routers, args.records)
    for name, footprint in footprints.items():
        print(f"{name:27} {footprint.describe()}")
    before, after = footprints.values()
    verdict = "met" if after.per_router <= BUDGET_BYTES else "NOT met"
    print(f"per router: {after.per_router / before.per_router:.2f}x of before; "
          f"budget {BUDGET_BYTES // 1024} KiB: {verdict}")
    print(f"per record ({args.records:,} each, indexes and TOAST included): "
          f"alert {per_record['alert']:.0f} bytes, flow {per_record['flow']:.0f} bytes, "
          f"activation {per_record['activation']:.0f} bytes")
    print(f"disk for N routers sending R records a day kept D days, polling P times a day "
          f"with activations kept A days: N x {after.per_router / 1024:.0f} KiB "
          f"+ N x R x D x ~{max(per_record['alert'], per_record['flow']):.0f} bytes "
          f"+ N x P x A x ~{per_record['activation']:.0f} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
