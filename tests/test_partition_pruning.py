"""Every query on the time-partitioned tables reads only the partitions of its time range:
each test reads the plan PostgreSQL makes for the service's own statement and fails when a
partition outside the range is in it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from server.db.connect import connect
from server.db.partitions import grid_floor
from server.db.reports import ACCESS_DAYS, DAILY_ACTIVITY
from server.routers.sql import SUBSCRIPTIONS
from server.db.status import ROUTERS_SEEN
from server.generation.sql import MAX_ALERTS, TELEMETRY_SUMMARY
from testkit.database import partitions_for_history

MAC = "02:00:00:00:00:07"
SHARD_NUMBER = re.compile(r"_[0-9]+$")  # a partition's own name ends in _pYYYYMMDD
HISTORY_DAYS = 45


@pytest.fixture
def daily_partitions(database, sql):
    """The test database with daily partitions for the last HISTORY_DAYS days and the next
    week, in place of the (empty) legacy partition; returns a connection to it."""
    partitions_for_history(database, HISTORY_DAYS)
    conn = connect(database)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("INSERT INTO routers (mac) VALUES (%s)", (MAC,))
        cur.execute("INSERT INTO generation_queue (mac) VALUES (%s)", (MAC,))
        cur.execute("INSERT INTO activations (mac) VALUES (%s)", (MAC,))
    yield conn
    conn.close()


def scanned_partitions(conn, statement: str, params=None, analyze: bool = False) -> set[str]:
    """Partitions the plan reads (with `analyze`, only those actually executed). Under Citus
    the plan holds each shard's plan (every one of them: `citus.explain_all_tasks`, a
    setting nothing reads on plain PostgreSQL), where a partition's shard is named after it
    with the shard's number."""
    with conn.cursor() as cur:
        cur.execute("SET citus.explain_all_tasks = on")
        options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
        cur.execute(f"EXPLAIN ({options}) {statement}", params)
        plan = cur.fetchone()[0]
    plan = orjson.loads(plan) if isinstance(plan, str) else plan
    found = set()

    def walk(node) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            relation = node.get("Relation Name")
            if relation and "_p" in relation and (not analyze or node.get("Actual Loops", 0)):
                found.add(SHARD_NUMBER.sub("", relation))
            for value in node.values():
                walk(value)

    walk(plan)
    return found


def partitions_between(table: str, start: datetime, end: datetime) -> set[str]:
    """Names of the daily partitions that overlap [start, end]."""
    day = grid_floor(start, 1)
    names = set()
    while day <= end:
        names.add(f"{table}_p{day:%Y%m%d}")
        day += timedelta(days=1)
    return names


def test_generation_summary_reads_only_the_window(daily_partitions):
    now = datetime.now(timezone.utc)
    window = timedelta(days=7)
    scanned = scanned_partitions(daily_partitions, TELEMETRY_SUMMARY, {
        "mac": MAC, "window": window, "detail_from": now - timedelta(days=3),
        "severity": 2, "sids": 10, "top": 10, "alerts": MAX_ALERTS})
    hours = now - window - timedelta(hours=1)  # the summaries count whole hours
    expected = (partitions_between("telemetry_alerts", hours, now)
                | partitions_between("telemetry_flows", hours, now)
                | partitions_between("telemetry_flow_days", hours - timedelta(days=1), now)
                | partitions_between("telemetry_alert_days", hours - timedelta(days=1), now)
                | partitions_between("activations", now - window, now)
                | partitions_between("activation_days", now - window - timedelta(days=1),
                                     now))
    assert scanned and scanned <= expected
    assert {name.split("_p")[0] for name in scanned} == {
        "telemetry_alerts", "telemetry_flows", "telemetry_flow_days", "telemetry_alert_days",
        "activations", "activation_days"}


def test_access_reports_read_only_their_month(daily_partitions):
    today = grid_floor(datetime.now(timezone.utc), 1)
    start, end = today - timedelta(days=30), today - timedelta(days=10)
    for statement in (DAILY_ACTIVITY, ACCESS_DAYS):
        scanned = scanned_partitions(daily_partitions, statement, {"start": start, "end": end})
        last = end - timedelta(seconds=1)
        assert scanned == (partitions_between("activations", start, last)
                           | partitions_between("activation_days", start, last))


def test_last_contact_stops_at_the_newest_partition_with_a_row(daily_partitions):
    # Unbounded by nature (a router's last contact may be months old): the plan reads the
    # partitions newest first and stops at the first row: it executes the (empty) ones
    # created ahead and today's, never an older one.
    today = f"activations_p{datetime.now(timezone.utc):%Y%m%d}"
    for statement in (SUBSCRIPTIONS, ROUTERS_SEEN):  # `status` reads each router's too
        scanned = scanned_partitions(daily_partitions, statement, analyze=True)
        assert today in scanned
        assert all(name >= today for name in scanned), statement


def test_a_last_contact_rolled_up_stops_at_its_day(daily_partitions, sql):
    """Activations before today are rolled up by day (server/jobs/activation_days.py): a
    router silent since three days ago is found in the rolled days read newest first, which
    stop at its day; none older is executed."""
    silent = "02:00:00:00:00:08"
    day = grid_floor(datetime.now(timezone.utc), 1) - timedelta(days=3)
    sql.rows("INSERT INTO routers (mac) VALUES (%s)", (silent,))
    for back in (3, 10):  # an older day of the same router must not be read
        sql.rows("INSERT INTO activation_days (mac, day, address, activations, first_seen, "
                 "last_seen) VALUES (%s, %s, '198.51.100.7', 5, %s, %s)",
                 (silent, day - timedelta(days=back - 3), day - timedelta(days=back - 3),
                  day - timedelta(days=back - 3, hours=-20)))
    sql.rows("UPDATE activation_rollup SET detail_from = %s",
             (grid_floor(datetime.now(timezone.utc), 1),))
    for statement in (SUBSCRIPTIONS, ROUTERS_SEEN):
        scanned = scanned_partitions(daily_partitions, statement, analyze=True)
        rolled = {name for name in scanned if name.startswith("activation_days")}
        assert f"activation_days_p{day:%Y%m%d}" in rolled
        assert all(name >= f"activation_days_p{day:%Y%m%d}" for name in rolled), rolled
    # seen within the week (not the day), from its rolled day's last call
    assert sql.rows(ROUTERS_SEEN)[0][:6] == (2, 1, 0, 1, 0, 0)
    assert sql.rows(SUBSCRIPTIONS)[1][4] == day + timedelta(hours=20)
