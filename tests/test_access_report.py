"""routeraccessreport against a few months of activations, checked against counts computed
here from the same generated data."""

from __future__ import annotations

import csv
import io
import random
import subprocess
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pytest

from testkit.database import command_env
from tests.commands import run_program

MACS = ["aa:bb:cc:00:10:01", "aa:bb:cc:00:10:02", "aa:bb:cc:00:10:03"]


@pytest.fixture
def activations(sql):
    """~3 months of activations at random moments, some days skipped; returns them."""
    rng = random.Random(11)
    start = datetime(2026, 7, 30, tzinfo=timezone.utc)
    moments = []
    for mac in MACS:
        for day in range(95):
            if rng.random() < 0.3:
                continue
            for _ in range(rng.randint(1, 4)):
                moments.append((mac, start + timedelta(days=day, seconds=rng.randint(0, 86399))))
    sql.rows("INSERT INTO activations (mac, activated_at) SELECT * FROM unnest(%s::macaddr[], "
             "%s::timestamptz[])", ([m for m, _ in moments], [t for _, t in moments]))
    return moments


def run_report(settings, *args: str) -> subprocess.CompletedProcess:
    return run_program("ops.routeraccessreport", command_env(settings), *args)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def test_daily_report(settings, activations):
    result = run_report(settings, "--type", "daily", "--start-date", "2026-08-01",
                        "--end-date", "2026-08-31")
    assert result.returncode == 0, result.stderr
    expected = defaultdict(list)
    for mac, moment in activations:
        if moment.month == 8:
            expected[(moment.date().isoformat(), mac)].append(moment)
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["date", "mac", "activations", "first_seen", "last_seen"]
    assert rows[1:] == [[day, mac, str(len(times)), iso(min(times)), iso(max(times))]
                        for (day, mac), times in sorted(expected.items())]


def test_monthly_report(settings, activations):
    result = run_report(settings, "--type", "monthly", "--month", "2026-09")
    assert result.returncode == 0, result.stderr
    days = defaultdict(set)
    for mac, moment in activations:
        if (moment.year, moment.month) == (2026, 9):
            days[mac].add(moment.date())
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["month", "mac", "unique_access_days"]
    assert rows[1:] == [["2026-09", mac, str(len(days[mac]))] for mac in sorted(days)]
    assert all(0 < len(d) <= 30 for d in days.values())


@pytest.mark.parametrize("args,message", [
    (["--type", "daily"], "needs --start-date"),
    (["--type", "monthly"], "needs --month"),
    (["--type", "weekly", "--start-date", "2026-01-01"], "invalid choice"),
    (["--type", "daily", "--start-date", "2026-02-30"], "not a valid date"),
    (["--type", "daily", "--start-date", "01/02/2026"], "not a date"),
    (["--type", "daily", "--start-date", "2026-03-02", "--end-date", "2026-03-01"], "before"),
    (["--type", "monthly", "--month", "2026-13"], "not a month"),
    (["--type", "monthly", "--month", "2026-01", "--start-date", "2026-01-01"], "daily"),
    ([], "required"),
])
def test_bad_arguments_exit_2(settings, args, message):
    result = run_report(settings, *args)
    assert result.returncode == 2
    assert message in result.stderr and result.stdout == ""
