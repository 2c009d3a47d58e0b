"""Retention: exactly the rows older than the limit go, and ingestion running at the same time
loses nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import orjson

from server.db.lifecycle import open_database
from server.jobs.retention import run_retention
from testkit.database import command_env

MAC = "aa:bb:cc:00:20:01"


def seed_rows(sql, table: str, old: int, recent: int) -> None:
    for count, age in ((old, "40 days"), (recent, "10 days")):
        sql.rows(f"INSERT INTO {table} (mac, received_at, record) SELECT %s, "
                 f"now() - interval '{age}' - n * interval '1 second', '{{}}'::jsonb "
                 f"FROM generate_series(1, %s) n", (MAC, count))


def seed_activations(sql, ages_in_days: list[int]) -> None:
    for age in ages_in_days:
        sql.rows("INSERT INTO activations (mac, activated_at) "
                 "VALUES (%s, now() - %s * interval '1 day')", (MAC, age))


async def test_removes_exactly_the_old_rows(settings, sql):
    seed_rows(sql, "ids_events", 1200, 300)
    seed_rows(sql, "cfm_records", 50, 70)
    seed_activations(sql, [1, 40, 399, 401, 800])
    async with open_database(settings) as db:
        detail = await run_retention(db, days=30, activation_days=400, batch_rows=250)
    assert detail["removed"] == {"ids_events": 1200, "cfm_records": 50, "activations": 2}
    # Activations follow their own, longer limit (the monthly report reads them).
    assert sql.value("SELECT count(*) FROM activations") == 3
    assert sql.value("SELECT count(*) FROM ids_events") == 300
    assert sql.value("SELECT count(*) FROM cfm_records") == 70
    assert sql.value("SELECT count(*) FROM ids_events WHERE received_at < "
                     "now() - interval '30 days'") == 0


async def test_concurrent_ingestion_loses_nothing(settings, sql, make_client):
    seed_rows(sql, "ids_events", 20_000, 0)
    client = await make_client(settings)
    body = b"\n".join(orjson.dumps({"event_type": "alert", "n": n}) for n in range(500))
    accepted = 0

    async def ingest() -> None:
        nonlocal accepted
        for _ in range(20):
            response = await client.post("/log/events", data=body, headers={
                "X-ID": MAC, "Content-Type": "application/x-ndjson"})
            assert response.status == 200
            accepted += (await response.json())["accepted"]

    async with open_database(settings) as db:
        _, detail = await asyncio.gather(ingest(), run_retention(db, days=30,
                                                                activation_days=400,
                                                                batch_rows=500))
    assert detail["removed"]["ids_events"] == 20_000
    assert accepted == 10_000
    assert sql.value("SELECT count(*) FROM ids_events") == 10_000


def test_retention_command(settings, sql):
    seed_rows(sql, "ids_events", 30, 5)
    seed_activations(sql, [3, 12])
    result = subprocess.run([sys.executable, "-m", "ops.cli", "retention"],
                            env=command_env(settings, RETENTION_DAYS="30",
                                            ACTIVATION_RETENTION_DAYS="10"),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "removed 30 IDS events and 0 CFM records" in result.stdout
    assert ", 1 activations before" in result.stdout
    assert sql.value("SELECT count(*) FROM activations") == 1
    assert sql.rows("SELECT job, status FROM job_runs") == [("retention", "succeeded")]
