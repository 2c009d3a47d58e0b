"""A closed day's hourly summaries packed into a row a router (server/telemetry/
summary_days.py): generation and the console read the same flows and alerts hour by hour
before and after, and while a day is both packed and still rows; the open day stays as
rows, and the alerts of the days the fleet job reads; a failed pack changes nothing;
retention keeps a packed day while any of its hours is kept."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from server.console.sql import ROUTER_PAGE_ON_ITS_SHARD
from server.db import jobs as ledger
from server.db.connect import connect
from server.db.lifecycle import open_database
from server.db.partitions import LIST_PARTITIONS, partitions_from_rows
from server.generation.sql import MAX_ALERTS, MAX_FIRED_SIDS, TELEMETRY_SUMMARY
from server.hunt.sql import UNREAD_UPLOAD
from server.jobs.retention import run_retention
from server.telemetry import summary_days
from server.telemetry.compaction import compact
from server.telemetry.sql import ALERTS_IN_WINDOW, FLOWS_IN_WINDOW
from testkit.database import migrate, partitions_for_history

MACS = ("aa:bb:cc:00:59:11", "aa:bb:cc:00:59:12")
WINDOW = timedelta(days=7)
HISTORY_DAYS = 12   # day partitions before today
DAYS = 10           # whole days of rows before today, then today's up to this hour
ADD_FLOW = """INSERT INTO telemetry_flows (mac, hour, app_proto, dest_port, flows)
VALUES (%s, %s, %s, %s, %s)"""
ADD_ALERT = """INSERT INTO telemetry_alerts (mac, hour, src_ip, dest_ip, signature_id,
    severity, alerts, last_seen, flow_ids, network)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"""


@pytest.fixture
def summaries(sql):
    """DAYS whole days of both routers' hourly summary rows, and today's up to the current
    hour, as ingestion writes them: per hour a few application protocols and many ports,
    most seen once; and a few alert rows, some without a source, severity or network, with
    their flow ids."""
    partitions_for_history(sql.location, HISTORY_DAYS)
    now = datetime.now(timezone.utc)
    first = today(now) - timedelta(days=DAYS)   # whatever the hour of the run
    hours = (now - first) // timedelta(hours=1) + 1
    pick = random.Random(59)
    flows, alerts = [], []
    for mac in MACS:
        for back in range(hours):
            at = first + timedelta(hours=back)
            for app_proto in pick.sample(["dns", "tls", "http", "quic", "ntp"], 2):
                flows.append((mac, at, app_proto, None, pick.randint(1, 9)))
            for port in pick.sample(range(1, 2_000), 12):
                flows.append((mac, at, None, port, pick.randint(1, 3)))
            for sid in pick.sample(range(2_000_001, 2_000_009), 3):
                source = pick.choice([None, f"198.51.100.{pick.randint(1, 9)}"])
                alerts.append((mac, at, source, "192.168.1.2", sid,
                               pick.choice([None, 1, 2, 3]), pick.randint(1, 5),
                               at + timedelta(minutes=pick.randint(0, 59)),
                               [str(pick.randint(1, 10**18)) for _ in range(pick.randint(0, 3))],
                               pick.choice([None, "203.0.113.0/24"])))
    with connect(sql.location) as conn:   # committed as the block ends
        conn.cursor().executemany(ADD_FLOW, flows)
        conn.cursor().executemany(ADD_ALERT, alerts)
    return now


def reads(sql, mac: str) -> dict:
    """Everything the router's summaries give their readers: every flow sum and alert row
    of the window, generation's summary, the console's signatures."""
    params = {"owner": "test", "mac": mac, "lease": timedelta(minutes=1), "window": WINDOW,
              "severity": 2, "sids": MAX_FIRED_SIDS, "top": 10, "alerts": MAX_ALERTS,
              "detail_from": "-infinity"}
    return {
        "flows": sql.rows(f"SELECT app_proto, dest_port, sum(flows) FROM {FLOWS_IN_WINDOW} f "
                          "GROUP BY 1, 2 ORDER BY 1, 2", params),
        "alerts": sql.rows(f"SELECT * FROM {ALERTS_IN_WINDOW} a ORDER BY 1, 4, 2, 3, 5",
                           params),
        "generation": generation(sql, params),
        "console": sql.rows(ROUTER_PAGE_ON_ITS_SHARD["signatures"], {"mac": mac})}


def generation(sql, params: dict) -> list:
    """Generation's summary, its alert pairs ordered whole (the statement orders them by
    count only)."""
    fired, apps, ports, pairs, *rest = sql.rows(TELEMETRY_SUMMARY, params)[0]
    return [fired, apps, ports, sorted(pairs or [], key=str), *rest]


def hourly_rows(sql, table: str, since: datetime, until: datetime) -> int:
    return sql.value(f"SELECT count(*) FROM {table} WHERE hour >= %s AND hour < %s",
                     (since, until))


def today(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def day_partitions(sql, table: str) -> list[str]:
    return sorted(partition.name for partition in partitions_from_rows(
        sql.rows(LIST_PARTITIONS, {"table": table})) if partition.start is not None)


HOSTILE = "aa:bb:cc:00:59:66"


def router_past_the_bound(sql, monkeypatch, now: datetime) -> str:
    """A router with more flow rows yesterday than ROWS_A_ROUTER (set to 500, where the
    others make 336 a day): 30 ports an hour, 720 rows; its MAC."""
    monkeypatch.setattr(summary_days, "ROWS_A_ROUTER", 500)
    yesterday = today(now) - timedelta(days=1)
    with connect(sql.location) as conn:
        conn.cursor().executemany(ADD_FLOW, [
            (HOSTILE, yesterday + timedelta(hours=hour), None, port, 1)
            for hour in range(24) for port in range(1, 31)])
    return HOSTILE


async def test_packed_days_read_as_their_rows_did(summaries, sql, settings, monkeypatch):
    monkeypatch.setattr(summary_days, "ROWS_A_STATEMENT", 300)  # a statement a router-day
    monkeypatch.setattr(summary_days, "ROUTERS_A_PAGE", 1)       # a page a router
    now = summaries
    before = {mac: reads(sql, mac) for mac in MACS}
    assert all(len(read["flows"]) > 1_000 and len(read["alerts"]) > 500
               and all(read["generation"][:4]) and read["console"]
               for read in before.values())
    partitions = {table: day_partitions(sql, table)
                  for table in ("telemetry_flows", "telemetry_alerts")}
    async with open_database(settings) as db:
        report = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=now)
    flows, alerts = report.summary_days["flows"], report.summary_days["alerts"]
    # Flows: every day before today (the days without rows too); alerts: those the fleet's
    # window (a day and an hour) no longer reaches.
    assert len(flows["partitions_dropped"]) == HISTORY_DAYS and flows["router_days"] == 20
    reach = now - timedelta(hours=25)
    assert len(alerts["partitions_dropped"]) == (today(reach) - today(now)).days + HISTORY_DAYS
    assert alerts["router_days"] == 2 * (DAYS - (today(now) - today(reach)).days)
    for table, packed in (("telemetry_flows", flows), ("telemetry_alerts", alerts)):
        assert packed["partitions_deferred"] == []
        assert day_partitions(sql, table) == sorted(
            set(partitions[table]) - set(packed["partitions_dropped"]))
    assert hourly_rows(sql, "telemetry_flows", now - timedelta(days=11), today(now)) == 0
    assert hourly_rows(sql, "telemetry_flows", today(now), now + timedelta(hours=1)) > 0
    assert hourly_rows(sql, "telemetry_alerts", today(reach), now + timedelta(hours=1)) > 0
    assert hourly_rows(sql, "telemetry_alerts", now - timedelta(days=11), today(reach)) == 0
    assert {mac: reads(sql, mac) for mac in MACS} == before


async def test_a_day_packed_and_still_rows_is_counted_once(summaries, sql, settings,
                                                          monkeypatch):
    """A crash between the packing and the drop: the next run packs nothing twice."""
    now = summaries
    before = {mac: reads(sql, mac) for mac in MACS}

    async def crashed(db, table, partitions, cutoff):
        return [], [partition.name for partition in partitions]

    monkeypatch.setattr(summary_days, "drop_partitions", crashed)
    async with open_database(settings) as db:
        first = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=now)
        assert first.summary_days["flows"]["router_days"] == 20
        assert first.summary_days["alerts"]["router_days"] > 0
        assert {mac: reads(sql, mac) for mac in MACS} == before
        monkeypatch.undo()
        second = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=now)
    for packed in (second.summary_days["flows"], second.summary_days["alerts"]):
        assert packed["router_days"] == 0 and packed["partitions_dropped"]
    assert {mac: reads(sql, mac) for mac in MACS} == before


async def test_a_day_is_packed_once_settled_and_its_alerts_once_past_the_fleet(
        summaries, sql, settings):
    now = summaries
    midnight = today(now)
    yesterday = midnight - timedelta(days=1)

    def name(table: str, day: datetime) -> str:
        return day.strftime(f"{table}_p%Y%m%d")

    async with open_database(settings) as db:
        waiting = await compact(db, 1_000, timedelta(hours=1), UNREAD_UPLOAD,
                                now=midnight + timedelta(minutes=30))
        assert name("telemetry_flows", yesterday) not in \
            waiting.summary_days["flows"]["partitions_dropped"]
        assert hourly_rows(sql, "telemetry_flows", yesterday, midnight) > 0  # not settled
        settled = await compact(db, 1_000, timedelta(hours=1), UNREAD_UPLOAD,
                                now=midnight + timedelta(hours=1))
        fleet_reads_it = await compact(db, 1_000, timedelta(hours=1), UNREAD_UPLOAD,
                                       now=midnight + timedelta(hours=24))
        past_the_fleet = await compact(db, 1_000, timedelta(hours=1), UNREAD_UPLOAD,
                                       now=midnight + timedelta(hours=25))
    assert settled.summary_days["flows"] == {
        "partitions_dropped": [name("telemetry_flows", yesterday)], "router_days": 2,
        "partitions_deferred": [], "partitions_kept": [], "routers_left_as_rows": 0,
        "open_day": {"router_days": 0, "routers_left_as_rows": 0}}   # settled at midnight
    assert name("telemetry_alerts", yesterday) not in \
        fleet_reads_it.summary_days["alerts"]["partitions_dropped"]
    assert past_the_fleet.summary_days["alerts"] == {
        "partitions_dropped": [name("telemetry_alerts", yesterday)], "router_days": 2,
        "partitions_deferred": [], "partitions_kept": [], "routers_left_as_rows": 0}


async def test_a_pack_that_fails_leaves_the_day_as_rows(summaries, sql, settings):
    now = summaries
    yesterday = today(now) - timedelta(days=1)
    rows = hourly_rows(sql, "telemetry_flows", yesterday, today(now))
    failing = summary_days.Summaries("telemetry_flows", "SELECT 1 / 0")
    async with open_database(settings) as db:
        with pytest.raises(Exception, match="division by zero"):
            await summary_days.pack_days(db, failing, now)
    assert hourly_rows(sql, "telemetry_flows", yesterday, today(now)) == rows
    assert sql.value("SELECT count(*) FROM telemetry_flow_days") == 0


async def test_retention_keeps_a_packed_day_while_any_of_its_hours_is(summaries, sql,
                                                                     settings):
    now = summaries
    async with open_database(settings) as db:
        await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=now)
        alert_days = sql.value("SELECT min(day) FROM telemetry_alert_days")
        kept = timedelta(days=3, hours=5)
        await run_retention(db, 30, 30, summaries_kept=kept)
    oldest = sql.value("SELECT min(day) FROM telemetry_flow_days")
    # The oldest packed day holds the oldest hour kept; the day before it went.
    assert oldest <= now - kept < oldest + timedelta(days=1)
    # Alerts' packed days stay as long as owners are shown alerts (30 days).
    assert sql.value("SELECT min(day) FROM telemetry_alert_days") == alert_days


async def test_rolled_back_the_packed_days_are_hourly_rows_again(summaries, sql, settings,
                                                                 distributed):
    """Migrations 0037, 0036 and 0035 rolled back: every packed entry an hourly row again,
    in partitions made again for the days whose partitions the packing dropped."""
    if distributed:
        pytest.skip("migrations are rolled back on one server (tests/conftest.py "
                    "single_server_database): the Citus mode distributes after them")
    now = summaries
    tables = {"telemetry_flows": "app_proto, dest_port, flows",
              "telemetry_alerts": "src_ip, dest_ip, signature_id, severity, alerts, "
                                  "last_seen, flow_ids, network"}

    def rows() -> dict:
        return {table: sorted(sql.rows(f"SELECT mac, hour, {columns} FROM {table}"), key=repr)
                for table, columns in tables.items()}

    before = rows()
    async with open_database(settings) as db:
        await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=now)
    # Today's settled hours packed in part too (none at midnight's hour).
    in_part = 2 if now.hour else 0
    assert sql.value("SELECT count(*) FROM telemetry_flow_days") == 20 + in_part
    assert sql.value("SELECT count(*) FROM telemetry_flow_days WHERE through < 24") == in_part
    migrate(sql.location, "0035.telemetry-flow-days", "rollback")
    assert rows() == before



def test_batches_are_bounded_by_rows_and_a_large_router_goes_alone():
    routers = [("a", 40_000), ("b", 40_000), ("c", 40_000), ("hostile", 1_500_000),
               ("d", 10)]
    assert summary_days._batches(routers) == [["a", "b"], ["c"], ["hostile"], ["d"]]
    assert summary_days._batches([]) == []


async def test_a_retention_run_holds_the_drop_back_to_the_next_run(summaries, sql, settings):
    """The two never detach one partition at once: while retention runs, the packed
    partitions are left attached (their days read packed) and dropped by the next run."""
    now = summaries
    before = {mac: reads(sql, mac) for mac in MACS}
    async with open_database(settings) as db:
        async with ledger.exclusive(db, "retention") as acquired:
            assert acquired
            held = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=now)
        assert held.summary_days["flows"]["partitions_dropped"] == []
        assert len(held.summary_days["flows"]["partitions_deferred"]) == HISTORY_DAYS
        assert {mac: reads(sql, mac) for mac in MACS} == before
        freed = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=now)
    assert len(freed.summary_days["flows"]["partitions_dropped"]) == HISTORY_DAYS
    assert {mac: reads(sql, mac) for mac in MACS} == before


async def test_a_router_day_too_large_for_one_row_stays_as_rows_with_its_partition(
        summaries, sql, settings, monkeypatch):
    """A router that made more rows in a day than one packed row may hold: its rows stay,
    and so does their partition (until retention); every other router's day is packed,
    and every reader reads the same."""
    now = summaries
    hostile = router_past_the_bound(sql, monkeypatch, now)
    yesterday = today(now) - timedelta(days=1)
    before = {mac: reads(sql, mac) for mac in (*MACS, hostile)}
    async with open_database(settings) as db:
        report = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=now)
    flows = report.summary_days["flows"]
    kept = yesterday.strftime("telemetry_flows_p%Y%m%d")
    assert flows["partitions_kept"] == [kept] and flows["routers_left_as_rows"] == 1
    assert kept not in flows["partitions_dropped"]
    assert len(flows["partitions_dropped"]) == HISTORY_DAYS - 1
    assert hourly_rows(sql, "telemetry_flows", yesterday, today(now)) >= 720
    assert sql.value("SELECT count(*) FROM telemetry_flow_days WHERE mac = %s",
                     (hostile,)) == 0
    assert {mac: reads(sql, mac) for mac in (*MACS, hostile)} == before


def packed_through(sql, day: datetime) -> list:
    return sql.rows("SELECT mac::text, through FROM telemetry_flow_days WHERE day = %s "
                    "ORDER BY 1", (day,))


async def test_the_open_days_flows_are_packed_as_its_hours_settle(summaries, sql, settings,
                                                                  monkeypatch):
    """Yesterday taken as the open day (whatever the hour of the run): its flows packed up
    to 14:00, then to 20:00, then the rest once it closed; each router's rows of the hours
    packed deleted, the later hours' left as rows; every reader reads the same throughout.
    A router with too many rows stays as rows."""
    now = summaries
    hostile = router_past_the_bound(sql, monkeypatch, now)
    yesterday = today(now) - timedelta(days=1)
    routers = (*MACS, hostile)
    before = {mac: reads(sql, mac) for mac in routers}
    async with open_database(settings) as db:
        for hour in (14, 20):
            at = yesterday + timedelta(hours=hour, minutes=7)
            report = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=at)
            assert report.summary_days["flows"]["open_day"] == {"router_days": 2,
                                                                "routers_left_as_rows": 1}
            assert packed_through(sql, yesterday) == [(mac, hour) for mac in MACS]
            assert hourly_rows(sql, "telemetry_flows", yesterday,   # the hostile router's
                               yesterday + timedelta(hours=hour)) == 30 * hour
            assert hourly_rows(sql, "telemetry_flows", yesterday + timedelta(hours=hour),
                               today(now)) == (24 - hour) * (2 * 14 + 30)
            assert {mac: reads(sql, mac) for mac in routers} == before
        again = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=at)
        assert again.summary_days["flows"]["open_day"]["router_days"] == 0
        closed = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, now=now)
    assert closed.summary_days["flows"]["routers_left_as_rows"] == 1
    assert packed_through(sql, yesterday) == [(mac, 24) for mac in MACS]
    assert {mac: reads(sql, mac) for mac in routers} == before


async def test_a_pack_of_open_hours_that_fails_moves_nothing(summaries, sql, settings):
    """The packed row and the deletion of its rows are one transaction."""
    now = summaries
    yesterday = today(now) - timedelta(days=1)
    rows = hourly_rows(sql, "telemetry_flows", yesterday, today(now))
    failing = summary_days.Summaries("telemetry_flows", summary_days.FLOWS.pack,
                                     "SELECT 1 / 0")
    async with open_database(settings) as db:
        with pytest.raises(Exception, match="division by zero"):
            await summary_days.pack_open_hours(db, failing, yesterday + timedelta(hours=9))
    assert hourly_rows(sql, "telemetry_flows", yesterday, today(now)) == rows
    assert sql.value("SELECT count(*) FROM telemetry_flow_days") == 0
