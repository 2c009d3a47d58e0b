"""Retention: whole partitions older than the limit are dropped, the one that straddles it is
trimmed to exactly the rows older than the limit (telemetry chunks by their newest record,
hourly summaries by their hour), and ingestion is never held up."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime, timedelta

import orjson
import psycopg
import pytest

from server.db import brief_locks
from server.db.connect import connect
from server.db.detach import detach_locking
from server.db.lifecycle import open_database
from server.db.partitions import LIST_PARTITIONS, partitions_from_rows
from server.jobs.retention import run_retention
from server.settings import load_settings
from server.telemetry.summary import summaries_kept
from server.telemetry.chunks import compress
from testkit.database import command_env
from testkit.telemetry import stored_count
from tests.commands import router_backend

MAC = "aa:bb:cc:00:20:01"
BODY = compress([b'{"event_type": "alert"}'])
CHUNKS = "telemetry_chunks"


def add_chunks(sql, times: str, params: tuple, kind: str = "events") -> None:
    """One chunk of one record at each time `times` (a query of times) gives."""
    sql.rows(f"INSERT INTO telemetry_chunks (mac, kind, received_at, first_received_at, "
             f"records, upload_times, upload_records, body) "
             f"SELECT %s, %s, t, t, 1, ARRAY[t], ARRAY[1], %s FROM ({times}) s(t)",
             (MAC, kind, BODY, *params))


def seed_rows(sql, kind: str, old: int, recent: int) -> None:
    for count, age in ((old, "40 days"), (recent, "10 days")):
        add_chunks(sql, f"SELECT now() - interval '{age}' - n * interval '1 second' "
                        f"FROM generate_series(1, %s) n", (count,), kind)


def seed_summaries(sql, old_hours: int, recent_hours: int) -> None:
    for count, age in ((old_hours, "40 days"), (recent_hours, "10 days")):
        sql.rows(f"INSERT INTO telemetry_alerts (mac, hour, signature_id, alerts, last_seen, "
                 f"flow_ids) SELECT %s, date_trunc('hour', now() - interval '{age}') "
                 f"- n * interval '1 hour', 2000001, 1, now(), '{{}}' "
                 f"FROM generate_series(1, %s) n", (MAC, count))


def seed_activations(sql, ages_in_days: list[int]) -> None:
    for age in ages_in_days:
        sql.rows("INSERT INTO activations (mac, activated_at) "
                 "VALUES (%s, now() - %s * interval '1 day')", (MAC, age))


def partitions(sql, table: str) -> list[str]:
    return [name for (name,) in sql.rows(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass ORDER BY 1", (table,))]


def first_daily_partition(sql) -> datetime:
    """Where the legacy partition ends: tomorrow, unless midnight (UTC) passed since the
    template database was migrated, when it is today."""
    legacy = partitions_from_rows(sql.rows(LIST_PARTITIONS, {"table": CHUNKS}))[0]
    return legacy.end


async def test_trims_the_straddling_partition_to_exactly_the_old_rows(settings, sql):
    # Rows of the past live in the legacy partitions (migrations 0014, 0018), which straddle
    # both cut-offs: they are trimmed row by row.
    seed_rows(sql, "events", 1200, 300)
    seed_rows(sql, "cfm", 50, 70)
    seed_summaries(sql, 24, 5)
    seed_activations(sql, [1, 40, 399, 401, 800])
    sql.rows("""INSERT INTO enforcement_days (mac, day, list, packets, bytes)
                SELECT '02:00:00:00:00:01', current_date - d, 'fleet', 1, 1
                FROM unnest(ARRAY[0, 30, 32]) AS d""")  # enforcement reports: 31 days
    async with open_database(settings) as db:
        detail = await run_retention(db, days=30, activation_days=400, batch_rows=250)
    deleted = {table: removed["rows_deleted"] for table, removed in detail["removed"].items()}
    assert deleted == {CHUNKS: 1250, "telemetry_alerts": 24, "telemetry_flows": 0,
                       "telemetry_flow_days": 0, "telemetry_alert_days": 0, "activations": 2, "activation_days": 0, "hunt_postings": 0,
                       "hunt_packed": 0, "enforcement": 1}
    assert sql.value("SELECT count(*) FROM enforcement_days") == 2
    assert all(not removed["partitions_dropped"] for removed in detail["removed"].values())
    # Activations follow their own, longer limit (the monthly report reads them).
    assert sql.value("SELECT count(*) FROM activations") == 3
    assert stored_count(sql) == 300 and stored_count(sql, "cfm") == 70
    assert sql.value("SELECT count(*) FROM telemetry_chunks WHERE received_at < "
                     "now() - interval '30 days'") == 0
    assert sql.value("SELECT count(*) FROM telemetry_alerts") == 5


async def test_drops_whole_partitions_and_trims_only_the_straddling_one(settings, sql,
                                                                        distributed):
    # Ten rows in each of the next six daily partitions; the clock moved so that the cut-off
    # falls at noon of the fourth day: three partitions and the legacy one go whole, the
    # fourth loses its 06:00 rows, the last two stay.
    first = first_daily_partition(sql)
    for day in range(6):
        add_chunks(sql, "SELECT %s::timestamptz FROM generate_series(1, 10)",
                   (first + timedelta(days=day, hours=6),))
    add_chunks(sql, "SELECT now()", ())
    sql.rows("ANALYZE telemetry_chunks")
    later = first + timedelta(days=3, hours=12) + timedelta(days=30)
    async with open_database(settings) as db:
        detail = await run_retention(db, days=30, activation_days=400, now=later)
    removed = detail["removed"][CHUNKS]
    expected_dropped = [f"{CHUNKS}_legacy"] + [
        f"{CHUNKS}_p{first + timedelta(days=day):%Y%m%d}" for day in range(3)]
    assert removed["partitions_dropped"] == expected_dropped
    # Under Citus the coordinator's partitions hold no rows (their shards do): no estimate.
    assert removed["rows_in_dropped_partitions_estimate"] == (0 if distributed else 31)
    assert removed["rows_deleted"] == 10
    assert stored_count(sql) == 20
    assert not set(expected_dropped) & set(partitions(sql, CHUNKS))
    assert sql.value("SELECT count(*) FROM pg_class WHERE relname = ANY(%s)",
                     (expected_dropped,)) == 0


async def test_dropping_partitions_never_blocks_ingestion(settings, sql, database):
    # An upload's transaction is open on a partition that stays; retention detaches others
    # concurrently. Another upload meanwhile is not held up, and the detach finishes once the
    # open transaction ends.
    first = first_daily_partition(sql)
    upload = connect(database)
    try:
        with upload.cursor() as cur:
            cur.execute("INSERT INTO telemetry_chunks (mac, kind, received_at, "
                        "first_received_at, records, upload_times, upload_records, body) "
                        "VALUES (%s, 'events', %s, %s, 1, ARRAY[%s], ARRAY[1], %s)",
                        (MAC, *[first + timedelta(days=5)] * 3, BODY))
        async with open_database(settings) as db:
            retention = asyncio.create_task(run_retention(
                db, days=30, activation_days=400,
                now=first + timedelta(days=2, hours=1) + timedelta(days=30)))
            await asyncio.sleep(0.5)
            started = asyncio.get_running_loop().time()
            await asyncio.to_thread(add_chunks, sql, "SELECT %s::timestamptz",
                                    (first + timedelta(days=5),))
            assert asyncio.get_running_loop().time() - started < 2
            assert not retention.done()  # waits for the open upload, never the other way
            upload.commit()
            detail = await asyncio.wait_for(retention, 30)
    finally:
        upload.close()
    assert len(detail["removed"][CHUNKS]["partitions_dropped"]) == 3
    assert stored_count(sql) == 2


async def test_finishes_a_detach_interrupted_by_a_crash(settings, sql, distributed):
    if distributed:
        pytest.skip("Citus detaches without CONCURRENTLY: no detach is ever left pending")
    first = first_daily_partition(sql)
    name = f"{CHUNKS}_p{first:%Y%m%d}"
    # A DETACH CONCURRENTLY cancelled in its second phase leaves the partition pending.
    conn = connect(sql.location)
    blocker = connect(sql.location)
    try:
        conn.autocommit = True
        with blocker.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {name}")  # an old snapshot that sees it
        with conn.cursor() as cur:
            cur.execute("SET statement_timeout = '500ms'")
            try:
                cur.execute(f"ALTER TABLE {CHUNKS} DETACH PARTITION {name} CONCURRENTLY")
            except psycopg.errors.QueryCanceled:
                pass
    finally:
        blocker.close()
        conn.close()
    assert sql.value("SELECT inhdetachpending FROM pg_inherits "
                     "WHERE inhrelid = %s::regclass", (name,))
    async with open_database(settings) as db:
        detail = await run_retention(db, days=30, activation_days=400)
    assert name in detail["removed"][CHUNKS]["partitions_dropped"]
    assert name not in partitions(sql, CHUNKS)


async def test_drops_a_partition_a_crash_left_detached(settings, sql):
    first = first_daily_partition(sql)
    name = f"{CHUNKS}_p{first:%Y%m%d}"
    add_chunks(sql, "SELECT %s::timestamptz", (first + timedelta(hours=1),))
    later = first + timedelta(days=1, hours=1) + timedelta(days=30)
    async with open_database(settings) as db:
        sql.rows(f"ALTER TABLE {CHUNKS} DETACH PARTITION {name}")  # ... and then a crash
        detail = await run_retention(db, days=30, activation_days=400, now=later)
    assert name in detail["removed"][CHUNKS]["partitions_dropped"]
    assert sql.value("SELECT count(*) FROM pg_class WHERE relname = %s", (name,)) == 0
    # A table of that shape newer than the cut-off is not taken for one.
    assert f"{CHUNKS}_p{first + timedelta(days=2):%Y%m%d}" in partitions(sql, CHUNKS)


async def test_concurrent_ingestion_loses_nothing(settings, sql, make_client):
    seed_rows(sql, "events", 20_000, 0)
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
    assert detail["removed"][CHUNKS]["rows_deleted"] == 20_000
    assert accepted == 10_000
    assert stored_count(sql) == 10_000


async def test_summaries_go_once_their_readers_no_longer_look_back(settings, sql):
    """The hourly summaries follow their own cut-off (summaries_kept: a week and an hour at
    the defaults), the records theirs (RETENTION_DAYS)."""
    seed_rows(sql, "events", 0, 20)  # 10 days old
    seed_summaries(sql, 0, 3)  # 10 days old
    sql.rows("INSERT INTO telemetry_alerts (mac, hour, signature_id, alerts, last_seen, "
             "flow_ids) SELECT %s, date_trunc('hour', now()) - n * interval '1 hour', "
             "2000001, 1, now(), '{}' FROM generate_series(0, 7 * 24) n", (MAC,))
    kept = summaries_kept(settings)
    assert kept == timedelta(days=7, hours=1)
    async with open_database(settings) as db:
        detail = await run_retention(db, days=30, activation_days=400, summaries_kept=kept)
    assert detail["removed"]["telemetry_alerts"]["rows_deleted"] == 3
    assert stored_count(sql) == 20  # records of 10 days stay
    # What generation reads (7 days and the hour that straddles them) stays whole.
    assert sql.value("SELECT count(*) FROM telemetry_alerts") == 7 * 24 + 1


async def test_packed_alert_days_are_kept_as_long_as_owners_are_shown_alerts(settings, sql):
    """An owner's frontend lists 30 days of alerts: their packed days stay 31 days (never
    past RETENTION_DAYS), while the hourly summaries go after a week."""
    sql.rows("""INSERT INTO telemetry_alert_days (mac, day, hours, src_ips, dest_ips,
                    signature_ids, severities, alerts, last_seen, flow_ids, networks)
                SELECT %s, date_trunc('day', now() - d * interval '1 day', 'UTC'), '{3}',
                       '{45.33.32.77}', '{192.168.1.20}', '{2001219}', '{1}', '{5}',
                       ARRAY[now()], '{"[]"}', '{NULL}'
                FROM unnest(ARRAY[10, 29, 33]) AS d""", (MAC,))
    async with open_database(settings) as db:
        await run_retention(db, days=30, activation_days=400,
                            summaries_kept=summaries_kept(settings))
    assert sql.value("SELECT count(*) FROM telemetry_alert_days") == 2
    async with open_database(settings) as db:
        await run_retention(db, days=20, activation_days=400,
                            summaries_kept=summaries_kept(settings))
    assert sql.value("SELECT count(*) FROM telemetry_alert_days") == 1  # RETENTION_DAYS 20


def test_summaries_are_kept_as_far_back_as_their_longest_reader_never_past_the_records(
        tmp_path):
    def kept(**environ: str) -> timedelta:
        return summaries_kept(load_settings({"DATA_DIR": str(tmp_path), **environ},
                                            env_file=None))

    assert kept() == timedelta(days=7, hours=1)  # generation's week, the console's
    assert kept(RULE_GENERATION_TELEMETRY_DAYS="14") == timedelta(days=14, hours=1)
    assert kept(FLEET_WINDOW_HOURS="240") == timedelta(days=10, hours=1)
    assert kept(FLEET_WINDOW_HOURS="720") == timedelta(days=30)  # RETENTION_DAYS
    assert kept(RETENTION_DAYS="3") == timedelta(days=3)


def test_retention_command(settings, sql):
    seed_rows(sql, "events", 30, 5)
    seed_summaries(sql, 2, 4)  # 40 and 10 days old: both past the summaries' week
    seed_activations(sql, [3, 12])
    result = router_backend(command_env(settings, RETENTION_DAYS="30",
                                        ACTIVATION_RETENTION_DAYS="10"), "retention")
    assert result.returncode == 0, result.stderr
    assert "telemetry chunks before" in result.stdout
    assert ": 0 partitions dropped (about 0 rows), 30 rows deleted" in result.stdout
    assert "activations before" in result.stdout and ", 1 rows deleted" in result.stdout
    assert re.search(r"alert summaries before \S+: 0 partitions dropped \(about 0 rows\), "
                     r"6 rows deleted", result.stdout), result.stdout
    assert sql.value("SELECT count(*) FROM telemetry_alerts") == 0
    assert sql.value("SELECT count(*) FROM activations") == 1
    assert sql.rows("SELECT job, status FROM job_runs") == [("retention", "succeeded")]


async def test_a_locking_detach_gives_up_in_bounded_time_while_uploads_hold_the_table(
        settings, sql, database, monkeypatch):
    """Under Citus a partition is detached without CONCURRENTLY: while an upload holds the
    table, each try waits LOCK_TIMEOUT at most (server/db/brief_locks.py), and the partition is left for the next
    run (tried here on plain PostgreSQL, where the same lock rules hold)."""
    monkeypatch.setattr(brief_locks, "PAUSE_SECONDS", 0.1)
    partition = partitions_from_rows(sql.rows(LIST_PARTITIONS, {"table": CHUNKS}))[1]
    upload = connect(database)
    try:
        with upload.cursor() as cur:  # an upload's transaction, still open
            cur.execute("INSERT INTO telemetry_chunks (mac, kind, received_at, "
                        "first_received_at, records, upload_times, upload_records, body) "
                        "VALUES (%s, 'events', now(), now(), 1, ARRAY[now()], ARRAY[1], %s)",
                        (MAC, BODY))
        async with open_database(settings) as db:
            started = time.monotonic()
            assert not await detach_locking(db, CHUNKS, partition)
            waited = time.monotonic() - started
            assert waited < brief_locks.TRIES * 1.0 + 1.5 + 2
            upload.commit()  # the upload ends: the next run detaches it
            assert await detach_locking(db, CHUNKS, partition)
    finally:
        upload.close()
    assert partition.name not in partitions(sql, CHUNKS)
