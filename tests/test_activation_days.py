"""Activations rolled up by day (migration 0019, the activation-days job): the access reports,
a router's last contact and where it called from read the same before and after, the days
rolled are gone from `activations`, and a failed roll-up leaves everything as it was."""

from __future__ import annotations

import random
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from unittest.mock import patch

import pytest

from server.db.activation_days import DETAIL_FROM_READ
from server.db.lifecycle import open_database
from server.generation.sql import MAX_ALERTS, TELEMETRY_SUMMARY
from server.jobs.activation_days import DETAIL_DAYS, roll_up_activations
from testkit.database import command_env

MACS = ["aa:bb:cc:00:19:01", "aa:bb:cc:00:19:02"]
SILENT = "aa:bb:cc:00:19:03"   # last called 20 days ago


@pytest.fixture
def activations(sql):
    """A month and a half of activations from two addresses, up to now, and a router silent
    for 20 days."""
    rng = random.Random(19)
    now = datetime.now(timezone.utc)
    rows = []
    for mac in MACS:
        for day in range(45):
            for _ in range(rng.randint(0, 5)):
                rows.append((mac, now - timedelta(days=day, seconds=rng.randint(0, 86399)),
                             rng.choice(["198.51.100.7", "2001:db8::7"])))
    rows.append((SILENT, now - timedelta(days=20), "203.0.113.9"))
    rows.append((SILENT, now - timedelta(days=20, hours=3), None))
    for mac in MACS + [SILENT]:
        sql.rows("INSERT INTO routers (mac) VALUES (%s)", (mac,))
    sql.rows("INSERT INTO activations (mac, activated_at, address) SELECT * FROM unnest("
             "%s::macaddr[], %s::timestamptz[], %s::inet[])",
             ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]))
    return rows


def command(settings, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", *args], env=command_env(settings),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def reports(settings) -> tuple[str, ...]:
    today = datetime.now(timezone.utc).date()
    last_month = (today.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    return (command(settings, "ops.routeraccessreport", "--type", "daily", "--start-date",
                    str(today - timedelta(days=44))),
            command(settings, "ops.routeraccessreport", "--type", "monthly", "--month",
                    last_month),
            command(settings, "ops.cli", "subscriptions", "list"))


async def test_rolled_up_days_read_the_same(settings, sql, activations):
    before = reports(settings)
    assert SILENT in before[2]
    async with open_database(settings) as db:
        detail = await roll_up_activations(db)
        again = await roll_up_activations(db)
    # Every UTC day from the oldest activation's to the cut (which days those are depends on
    # the time of day the test runs).
    oldest = min(moment for _, moment, _ in activations).date()
    cut = datetime.now(timezone.utc).date() - timedelta(days=DETAIL_DAYS)
    assert detail["days_rolled"] == (cut - oldest).days and detail["rows_written"] > 0
    assert again["days_rolled"] == 0 and again["rows_written"] == 0
    assert reports(settings) == before
    cut = sql.value("SELECT detail_from FROM activation_rollup")
    assert sql.value("SELECT count(*) FROM activations WHERE activated_at < %s", (cut,)) == 0
    kept = sum(1 for _, moment, _ in activations if moment >= cut)
    assert sql.value("SELECT count(*) FROM activations") == kept
    assert sql.value("SELECT sum(activations) FROM activation_days") == \
        len(activations) - kept
    # A router's rolled day keeps each address it called from, with its count.
    assert sql.rows("SELECT host(address), activations FROM activation_days "
                    "WHERE mac = %s ORDER BY 1", (SILENT,)) == [("203.0.113.9", 1), (None, 1)]


async def test_a_failed_roll_up_changes_nothing(settings, sql, activations):
    before = reports(settings)
    sql.rows("ALTER TABLE activation_days ADD CONSTRAINT none_yet CHECK (activations < 0) "
             "NOT VALID")
    async with open_database(settings) as db:
        with pytest.raises(Exception, match="none_yet"):
            await roll_up_activations(db)
    assert sql.value("SELECT detail_from::text FROM activation_rollup") == "-infinity"
    assert sql.value("SELECT count(*) FROM activations") == len(activations)
    assert reports(settings) == before


async def test_where_a_router_called_from_within_the_window_reads_the_same(settings, sql):
    """Generation's addresses a router called from within its window: a rolled day counts an
    address when its last call from there is within the window, not the whole day."""
    mac = "aa:bb:cc:00:19:04"
    now = datetime.now(timezone.utc)
    sql.rows("INSERT INTO routers (mac) VALUES (%s)", (mac,))
    # a second before the window: its rolled day starts within a day of it (at every hour
    # of a run but the day's last second)
    for moment, address in ((now - timedelta(hours=24, seconds=1), "198.51.100.30"),
                            (now - timedelta(hours=2), "198.51.100.2"),
                            (now - timedelta(minutes=1), "198.51.100.2")):
        sql.rows("INSERT INTO activations (mac, activated_at, address) VALUES (%s, %s, %s)",
                 (mac, moment, address))

    def addresses() -> list:
        detail_from = sql.value(f"SELECT {DETAIL_FROM_READ}")
        return sql.rows(TELEMETRY_SUMMARY, {
            "mac": mac, "keys": [mac], "window": timedelta(hours=24), "detail_from": detail_from,
            "severity": 2, "sids": 10, "top": 10, "alerts": MAX_ALERTS})[0][4]

    assert addresses() == ["198.51.100.2"]
    async with open_database(settings) as db:
        assert (await roll_up_activations(db))["days_rolled"] >= 1
    assert sql.value("SELECT count(*) FROM activation_days WHERE mac = %s", (mac,)) >= 1
    assert addresses() == ["198.51.100.2"]


async def test_a_day_rolled_a_router_a_statement_and_cut_short_reads_the_same(settings, sql,
                                                                              activations):
    """A day rolled a range of routers a statement (here one router each, and a MAC no
    longer registered in the open-ended last range); a roll that fails part-way leaves the
    watermark, so readers read the activations one by one, and the next run finishes it
    without counting the routers rolled before twice."""
    gone = "aa:bb:cc:00:19:ff"  # activations of a router removed since
    first = "aa:bb:cc:00:19:00"  # rolled before the second of MACS, on the oldest day
    oldest = datetime.now(timezone.utc) - timedelta(days=50)
    sql.rows("INSERT INTO routers (mac) VALUES (%s)", (first,))
    for mac, moment in ((gone, oldest), (first, oldest), (MACS[1], oldest)):
        sql.rows("INSERT INTO activations (mac, activated_at, address) VALUES (%s, %s, NULL)",
                 (mac, moment))
    before = reports(settings)
    sql.rows("ALTER TABLE activation_days ADD CONSTRAINT not_the_second CHECK "
             f"(mac <> '{MACS[1]}') NOT VALID")
    async with open_database(settings) as db:
        with (pytest.raises(Exception, match="not_the_second"),
              patch("server.db.activation_days.ROUTERS_A_STATEMENT", 1)):
            await roll_up_activations(db)
    assert sql.value("SELECT count(*) FROM activation_days WHERE mac = %s", (first,)) == 1
    assert sql.value("SELECT detail_from::text FROM activation_rollup") == "-infinity"
    assert reports(settings) == before
    sql.rows("ALTER TABLE activation_days DROP CONSTRAINT not_the_second")
    async with open_database(settings) as db:
        with patch("server.db.activation_days.ROUTERS_A_STATEMENT", 1):
            detail = await roll_up_activations(db)
    assert detail["days_rolled"] > 0
    assert reports(settings) == before
    kept = sql.value("SELECT count(*) FROM activations")
    assert sql.value("SELECT sum(activations) FROM activation_days") == \
        len(activations) + 3 - kept
    assert sql.value("SELECT activations FROM activation_days WHERE mac = %s", (gone,)) == 1
