"""`routeraccessreport`: router access activity as CSV on stdout, streamed from the database.

    routeraccessreport --type daily --start-date 2026-11-01 [--end-date 2026-11-30]
    routeraccessreport --type monthly --month 2026-11

Daily: one row per router and UTC day in the window (the end date defaults to today, UTC):
date, mac, activations, first_seen, last_seen. Monthly: one row per router active in the
calendar month: month, mac, unique_access_days. Bad or missing arguments: a message on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from datetime import date, datetime, timedelta, timezone

from ops.command import run_command
from server.db import reports
from server.db.pool import Database
from server.settings import Settings
from server.timestamps import iso_utc

PROG = "routeraccessreport"


def _day(text: str) -> date:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid date") from None


def _month(text: str) -> date:
    if not re.fullmatch(r"\d{4}-\d{2}", text) or not 1 <= int(text[5:]) <= 12:
        raise argparse.ArgumentTypeError(f"{text!r} is not a month (YYYY-MM)")
    return date(int(text[:4]), int(text[5:]), 1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--type", required=True, choices=("daily", "monthly"))
    parser.add_argument("--start-date", type=_day, help="first day (daily), YYYY-MM-DD")
    parser.add_argument("--end-date", type=_day, help="last day (daily), default today (UTC)")
    parser.add_argument("--month", type=_month, help="the month (monthly), YYYY-MM")
    args = parser.parse_args(argv)
    if args.type == "daily":
        if args.start_date is None:
            parser.error("--type daily needs --start-date")
        if args.month is not None:
            parser.error("--month is for --type monthly")
        args.end_date = args.end_date or datetime.now(timezone.utc).date()
        if args.end_date < args.start_date:
            parser.error("--end-date is before --start-date")
    else:
        if args.month is None:
            parser.error("--type monthly needs --month")
        if args.start_date is not None or args.end_date is not None:
            parser.error("--start-date and --end-date are for --type daily")
    return args


def _utc(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)


async def write_report(db: Database, args: argparse.Namespace, out) -> int:
    """The CSV on `out`, header first; returns the number of data rows."""
    writer = csv.writer(out, lineterminator="\n")
    rows = 0
    if args.type == "daily":
        writer.writerow(("date", "mac", "activations", "first_seen", "last_seen"))
        end = _utc(args.end_date + timedelta(days=1))
        async for day, mac, count, first, last in reports.daily_activity(
                db, _utc(args.start_date), end):
            writer.writerow((day.isoformat(), mac, count, iso_utc(first), iso_utc(last)))
            rows += 1
    else:
        writer.writerow(("month", "mac", "unique_access_days"))
        following = (args.month + timedelta(days=32)).replace(day=1)
        month = args.month.strftime("%Y-%m")
        async for mac, days in reports.access_days(db, _utc(args.month), _utc(following)):
            writer.writerow((month, mac, days))
            rows += 1
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    async def report(settings: Settings, db: Database) -> int:
        await write_report(db, args, sys.stdout)
        return 0
    return run_command(PROG, report)


if __name__ == "__main__":
    sys.exit(main())
