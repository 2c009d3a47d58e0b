"""A closed day's hourly flow summaries packed into a row a router (server/telemetry/
flow_days.py): generation reads the same flows hour by hour before and after, and while a
day is both packed and still rows, the open day stays as rows, a failed pack changes
nothing, retention keeps a packed day while any of its hours is kept."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from server.db.connect import connect
from server.db.lifecycle import open_database
from server.generation.sql import MAX_ALERTS, MAX_FIRED_SIDS, TELEMETRY_SUMMARY
from server.hunt.sql import UNREAD_UPLOAD
from server.jobs.retention import run_retention
from server.telemetry import flow_days
from server.telemetry.compaction import compact
from server.telemetry.sql import FLOWS_IN_WINDOW
from testkit.database import partitions_for_history

MACS = ("aa:bb:cc:00:59:11", "aa:bb:cc:00:59:12")
WINDOW = timedelta(days=7)
ADD_ROW = """INSERT INTO telemetry_flows (mac, hour, app_proto, dest_port, flows)
VALUES (%s, %s, %s, %s, %s)"""


@pytest.fixture
def flows(sql):
    """Ten days of both routers' hourly flow rows, up to the current hour, as ingestion
    writes them: per hour a few application protocols and many ports, most seen once."""
    partitions_for_history(sql.location, 12)
    now = datetime.now(timezone.utc)
    hour = now.replace(minute=0, second=0, microsecond=0)
    pick = random.Random(59)
    rows = []
    for mac in MACS:
        for back in range(10 * 24):
            at = hour - timedelta(hours=back)
            for app_proto in pick.sample(["dns", "tls", "http", "quic", "ntp"], 2):
                rows.append((mac, at, app_proto, None, pick.randint(1, 9)))
            for port in pick.sample(range(1, 2_000), 12):
                rows.append((mac, at, None, port, pick.randint(1, 3)))
    with connect(sql.location) as conn:   # committed as the block ends
        conn.cursor().executemany(ADD_ROW, rows)
    return now


def in_window(sql, mac: str) -> list[tuple]:
    """The router's flow sums of the window, every value, as generation reads them."""
    return sql.rows(f"SELECT app_proto, dest_port, sum(flows) FROM {FLOWS_IN_WINDOW} f "
                    "GROUP BY 1, 2 ORDER BY 1, 2", {"mac": mac, "window": WINDOW})


def generation_reads(sql, mac: str) -> tuple:
    params = {"owner": "test", "mac": mac, "lease": timedelta(minutes=1), "window": WINDOW,
              "severity": 2, "sids": MAX_FIRED_SIDS, "top": 10, "alerts": MAX_ALERTS,
              "detail_from": "-infinity"}
    return tuple(sql.rows(TELEMETRY_SUMMARY, params)[0][1:3])  # top protocols and ports


def hourly_rows(sql, since: datetime, until: datetime) -> int:
    return sql.value("SELECT count(*) FROM telemetry_flows WHERE hour >= %s AND hour < %s",
                     (since, until))


def today(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def day_partitions(sql, table: str = "telemetry_flows") -> list[str]:
    return [name for (name, start) in sql.rows(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass "
        "ORDER BY 1", (table,)) if "MINVALUE" not in start]


async def test_packed_days_read_as_their_rows_did(flows, sql, settings):
    now = flows
    before = {mac: (in_window(sql, mac), generation_reads(sql, mac)) for mac in MACS}
    assert all(len(sums) > 1_000 and reads[0] and reads[1]
               for sums, reads in before.values())
    partitions = day_partitions(sql)
    async with open_database(settings) as db:
        report = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD)
    packed = report.flow_days
    assert packed["router_days"] == 20 and packed["partitions_deferred"] == []
    # The closed days' partitions dropped (their space given back at once), today's kept.
    assert len(packed["partitions_dropped"]) == 12
    assert day_partitions(sql) == sorted(set(partitions) - set(packed["partitions_dropped"]))
    assert hourly_rows(sql, now - timedelta(days=11), today(now)) == 0
    assert hourly_rows(sql, today(now), now + timedelta(hours=1)) > 0   # open: as rows
    assert sql.value("SELECT count(*) FROM telemetry_flow_days") == 20
    assert {mac: (in_window(sql, mac), generation_reads(sql, mac)) for mac in MACS} == before


async def test_a_day_packed_and_still_rows_is_counted_once(flows, sql, settings,
                                                          monkeypatch):
    """A crash between the packing and the drop: the next run packs nothing twice."""
    before = {mac: in_window(sql, mac) for mac in MACS}

    async def crashed(db, table, partitions, cutoff):
        return [], [partition.name for partition in partitions]

    monkeypatch.setattr(flow_days, "drop_partitions", crashed)
    async with open_database(settings) as db:
        first = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD)
        assert first.flow_days["router_days"] == 20
        assert {mac: in_window(sql, mac) for mac in MACS} == before
        monkeypatch.undo()
        second = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD)
    assert second.flow_days["router_days"] == 0 and len(
        second.flow_days["partitions_dropped"]) == 12
    assert {mac: in_window(sql, mac) for mac in MACS} == before


async def test_a_day_is_packed_once_settled(flows, sql, settings):
    now = flows
    midnight = today(now)
    yesterday = (midnight - timedelta(days=1)).strftime("telemetry_flows_p%Y%m%d")
    async with open_database(settings) as db:
        waiting = await compact(db, 1_000, timedelta(hours=1), UNREAD_UPLOAD,
                                now=midnight + timedelta(minutes=30))
        assert yesterday not in waiting.flow_days["partitions_dropped"]
        assert hourly_rows(sql, midnight - timedelta(days=1), midnight) > 0  # not settled
        settled = await compact(db, 1_000, timedelta(hours=1), UNREAD_UPLOAD,
                                now=midnight + timedelta(hours=1))
    assert settled.flow_days == {"partitions_dropped": [yesterday], "router_days": 2,
                                 "partitions_deferred": []}


async def test_a_pack_that_fails_leaves_the_day_as_rows(flows, sql, settings, monkeypatch):
    now = flows
    yesterday = today(now) - timedelta(days=1)
    rows = hourly_rows(sql, yesterday, today(now))
    monkeypatch.setattr(flow_days, "PACK_FLOW_DAYS", "SELECT 1 / 0")
    async with open_database(settings) as db:
        with pytest.raises(Exception, match="division by zero"):
            await flow_days.pack_flow_days(db, now)
    assert hourly_rows(sql, yesterday, today(now)) == rows
    assert sql.value("SELECT count(*) FROM telemetry_flow_days") == 0


async def test_retention_keeps_a_packed_day_while_any_of_its_hours_is(flows, sql, settings):
    now = flows
    async with open_database(settings) as db:
        await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD)
        kept = timedelta(days=3, hours=5)
        await run_retention(db, 30, 30, summaries_kept=kept)
    oldest = sql.value("SELECT min(day) FROM telemetry_flow_days")
    # The oldest packed day holds the oldest hour kept; the day before it went.
    assert oldest <= now - kept < oldest + timedelta(days=1)
