"""`router-backend reports weekly [--week-ending TIME] [--user ID ...]`: the owners' weekly
reports due now made at once, as the `weekly-reports` job makes them every hour; with
`--week-ending`, the reports of the week ending then (an owner already told of a week
that ended less than a week before it is not told again), for every owner or those named.
Each owner is told once per week whatever runs it (server/reports/weekly.py)."""

from __future__ import annotations

import argparse

from ops.command import Command, moment, sub_command
from server.db.pool import Database
from server.reports.jobs import SignatureNames
from server.reports.weekly import send_weekly_reports
from server.settings import Settings

PROG = "router-backend reports"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    weekly = actions.add_parser("weekly", help="the owners' weekly reports that are due, now")
    weekly.add_argument("--week-ending", type=moment, default=None,
                        help="the week ending at this time (ISO 8601; UTC when it names no "
                             "zone) instead of each owner's last chosen moment")
    weekly.add_argument("--user", action="append", default=None,
                        help="only this owner (repeatable)")
    weekly.set_defaults(act=_weekly)


async def _weekly(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    done = await send_weekly_reports(db, SignatureNames(settings.rule_data_path),
                                     users=args.user, week_end=args.week_ending)
    if done.get("elsewhere"):
        print("reports: the weekly-reports job is running in another process; nothing done")
        return 1
    print(f"reports: {done['reports']} weekly reports made for {done['routers']} routers "
          f"({done['owners']} owners read)")
    return 0


COMMAND = Command("reports", "the owners' weekly reports: make those due now, or a given "
                  "week's", add_arguments, sub_command(PROG))
