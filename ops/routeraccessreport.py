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

import psycopg2

from ops.command import EXIT_FAILED, EXIT_USAGE
from server.db.lifecycle import configure_db_logging, prepare_database
from server.settings import SettingsError, load_settings

PROG = "routeraccessreport"
FETCH_ROWS = 5_000

DAILY = """
SELECT (activated_at AT TIME ZONE 'UTC')::date, mac::text, count(*),
       min(activated_at), max(activated_at)
FROM activations WHERE activated_at >= %(start)s AND activated_at < %(end)s
GROUP BY 1, 2 ORDER BY 1, 2"""

MONTHLY = """
SELECT mac::text, count(DISTINCT (activated_at AT TIME ZONE 'UTC')::date)
FROM activations WHERE activated_at >= %(start)s AND activated_at < %(end)s
GROUP BY 1 ORDER BY 1"""


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


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def write_report(conn, args: argparse.Namespace, out) -> int:
    writer = csv.writer(out, lineterminator="\n")
    if args.type == "daily":
        params = {"start": _utc(args.start_date), "end": _utc(args.end_date + timedelta(1))}
        statement, header = DAILY, ("date", "mac", "activations", "first_seen", "last_seen")
    else:
        following = (args.month + timedelta(days=32)).replace(day=1)
        params = {"start": _utc(args.month), "end": _utc(following)}
        statement, header = MONTHLY, ("month", "mac", "unique_access_days")
    writer.writerow(header)
    rows = 0
    with conn.cursor(name="report") as cur:  # server-side: rows stream, memory stays flat
        cur.itersize = FETCH_ROWS
        cur.execute(statement, params)
        for row in cur:
            if args.type == "daily":
                writer.writerow((row[0].isoformat(), row[1], row[2], _iso(row[3]), _iso(row[4])))
            else:
                writer.writerow((args.month.strftime("%Y-%m"), row[0], row[1]))
            rows += 1
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return EXIT_USAGE
    configure_db_logging(settings)
    try:
        location, embedded = prepare_database(settings)
    except ConnectionError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    try:
        conn = psycopg2.connect(**location.connect_kwargs())
        try:
            with conn:
                write_report(conn, args, sys.stdout)
        finally:
            conn.close()
    except psycopg2.Error as error:
        print(f"{PROG}: error: database: {str(error).strip()}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
