"""Upgrading a database of the release before migration 0018 (one jsonb row per record):
every record is moved into chunks by the compaction job (here `router-backend telemetry
compact`, run by hand) and exported afterwards, once each; the summaries written as they are
moved give generation what the rows gave it."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta, timezone

import orjson

from migrations import read_schema_migrations
from server.db.connect import connect
from server.telemetry.extract import EVENT_COLUMNS, event_row
from testkit import CORPUS
from testkit.database import Sql, command_env, migrate, migrated_database, settings_for
from testkit.telemetry import SUMMARY_OF_BEFORE
from tests.commands import router_backend

ROUTERS = [f"aa:bb:cc:00:18:{n:02x}" for n in range(3)]
CHUNKS = "0018.telemetry-chunks"
LATEST = max(migration.id for migration in read_schema_migrations())
PARAMS = {"window": timedelta(days=7), "severity": 2, "sids": 2000, "top": 32,
          "alerts": 5000, "detail_from": "-infinity"}


def corpus_lines() -> dict[str, list[bytes]]:
    lines = {"alert": [], "flow": []}
    for path in sorted((CORPUS / "eve").glob("*.json")):
        for line in path.read_bytes().splitlines():
            kind = orjson.loads(line).get("event_type") if line.strip() else None
            if kind in lines:
                lines[kind].append(line)
    return lines


def fill_rows(location) -> dict[str, list]:
    """Each router's alerts and flows as rows of the release before, received in uploads of
    50 over the last three days: what each router should get back, in order."""
    lines = corpus_lines()
    now = datetime.now(timezone.utc)
    expected = {mac: [] for mac in ROUTERS}
    events, flows = [], []
    for n, mac in enumerate(ROUTERS):
        for kind, rows in (("alert", events), ("flow", flows)):
            for position, line in enumerate(lines[kind][n::len(ROUTERS)]):
                received_at = now - timedelta(hours=72) + timedelta(minutes=position // 50)
                record = orjson.loads(line)
                values = event_row(record)
                values[0] = values[0] and values[0].isoformat()
                rows.append((mac, received_at, *values, line.decode()))
                expected[mac].append(record)
    columns = ", ".join(("mac", "received_at") + EVENT_COLUMNS + ("record",))
    marks = ", ".join(["%s"] * (len(EVENT_COLUMNS) + 3))
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(f"INSERT INTO ids_events ({columns}) VALUES ({marks})", events)
            flow_columns = columns.replace(", signature_id, severity", "")
            cur.executemany(f"INSERT INTO cfm_records ({flow_columns}) VALUES "
                            f"({', '.join(['%s'] * (len(EVENT_COLUMNS) + 1))})",
                            [row[:-3] + row[-1:] for row in flows])
    finally:
        conn.close()
    return expected


def summary_of(location, mac: str, statement: str) -> list:
    rows = Sql(location).rows(statement, {**PARAMS, "mac": mac, "owner": "t",
                                          "lease": timedelta(minutes=1)})[0]
    return list(rows)


def canonical(record: dict) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def command(settings, *args: str) -> subprocess.CompletedProcess:
    return router_backend(command_env(settings), *args, text=False)


def test_a_filled_database_upgraded_keeps_every_record(pg_server, tmp_path):
    with migrated_database(pg_server, "rb_upgrade", distributed=False) as location:
        migrate(location, CHUNKS, "rollback")  # the schema of the release before
        expected = fill_rows(location)
        before = {mac: summary_of(location, mac, SUMMARY_OF_BEFORE) for mac in ROUTERS}
        migrate(location, LATEST)
        sql = Sql(location)
        assert sql.value("SELECT count(*) FROM legacy_ids_events") > 0
        settings = settings_for(location, tmp_path)

        moved = command(settings, "telemetry", "compact")
        assert moved.returncode == 0, moved.stderr
        total = sum(len(records) for records in expected.values())
        assert b"records moved from legacy_ids_events" in moved.stdout
        assert sql.value("SELECT to_regclass('legacy_ids_events')") is None
        assert sql.value("SELECT to_regclass('legacy_cfm_records')") is None
        assert sql.value("SELECT sum(records) FROM telemetry_chunks") == total
        for mac, records in expected.items():
            exported = command(settings, "telemetry", "export", "--mac", mac)
            assert exported.returncode == 0, exported.stderr
            got = [orjson.loads(line) for line in exported.stdout.splitlines()]
            assert sorted(map(canonical, got)) == sorted(map(canonical, records))
            assert len(got) == len(records)

        from server.generation.sql import TELEMETRY_SUMMARY
        for mac in ROUTERS:
            now = summary_of(location, mac, TELEMETRY_SUMMARY)[0:4]
            now[3] = sorted(now[3] or [], key=lambda row: (-row[4], str(row)))
            before[mac][3] = sorted(before[mac][3] or [], key=lambda row: (-row[4], str(row)))
            assert now == before[mac]
