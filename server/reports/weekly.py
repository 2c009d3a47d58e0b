"""The weekly reports (issue 83): each owner whose chosen moment has come (schedule.py) gets
one notification of type `weekly_report`, emailed (the notification service's retry loop
sends it) and in their feed, with the week's figures in its `metadata` (figures.py) and as
plain text (texts.py). Sent when nothing happened too: it says all was quiet.

Run every hour by the `weekly-reports` job, one process at a time (an advisory lock); each
report is claimed (`weekly_reports`) in the transaction that stores its notification, so a
rerun, a crash between two batches or a second process tells nobody twice. Owners are
read OWNERS_A_BATCH at a time and their routers' figures MACS_A_STATEMENT routers a
statement, from the hourly and daily summaries (never the records): memory stays that of
one batch whatever the fleet."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import datetime
from typing import Callable

import orjson

from server.db.jobs import exclusive
from server.db.pool import Database
from server.notify.sql import store_many
from server.reports import sql as reports_db
from server.reports.figures import ownership_start, owner_report, router_weeks
from server.reports.schedule import APART, DEFAULT, WEEK, Schedule
from server.reports.texts import message, title

log = logging.getLogger("router_backend.reports")

TYPE = "weekly_report"
OWNERS_A_BATCH = 200
MACS_A_STATEMENT = 1_000

Names = Callable[[], dict[int, str]]


async def send_weekly_reports(db: Database, names: Names = dict, now: datetime | None = None,
                              users: list[str] | None = None,
                              week_end: datetime | None = None) -> dict:
    """Every owner's report that is due at `now` (the database's clock by default), or of
    `users`; `week_end`: the week ending then instead of each owner's last chosen moment
    (`router-backend reports weekly --week-ending`). `names`: the signatures' messages,
    read once a run and only when some report is due."""
    async with exclusive(db, "weekly-reports") as acquired:
        if not acquired:
            return {"reports": 0, "elsewhere": True}
        if now is None:
            (now,) = await db.fetchrow("SELECT now()")
        run = _Run(db, names, now, week_end)
        owners = await reports_db.owners(db, users)
        for first in range(0, len(owners), OWNERS_A_BATCH):
            await run.batch(owners[first:first + OWNERS_A_BATCH])
        return {"owners": len(owners), "reports": run.made, "routers": run.routers}


class _Run:
    def __init__(self, db: Database, names: Names, now: datetime, week_end: datetime | None):
        self._db, self._names, self._now, self._week_end = db, names, now, week_end
        self._known_names: dict[int, str] | None = None
        self.made = self.routers = 0

    def _due(self, schedule: Schedule, last_end: datetime | None) -> datetime | None:
        if self._week_end is None:
            return schedule.due(self._now, last_end)
        if not schedule.weekly or (last_end is not None
                                   and self._week_end - last_end <= APART):
            return None
        return self._week_end

    async def batch(self, owners: list[tuple]) -> None:
        users = [user for user, _, _ in owners]
        chosen = await reports_db.schedules(self._db, users)
        last = await reports_db.last_ends(self._db, users)
        due = {}
        for user, email, _ in owners:
            schedule = chosen.get(user, DEFAULT)
            end = self._due(schedule, last.get(user))
            if end is not None:
                due[user] = (email, schedule, end)
        if not due:
            return
        if self._known_names is None:
            self._known_names = await asyncio.to_thread(self._names)
        routers = await reports_db.routers_of(self._db, sorted(due))
        periods: dict[tuple[datetime, datetime], list[str]] = {}
        for user, (_, _, end) in due.items():
            for mac, since in routers.get(user, []):
                start = ownership_start(end - WEEK, end, since)
                periods.setdefault((start, end), []).append(mac)
        weeks: dict[str, dict] = {}
        for (start, end), macs in periods.items():
            weeks |= await self._weeks(macs, start, end)
        notifications, claims = [], []
        for user, (email, schedule, end) in due.items():
            theirs = [weeks[mac] for mac, _ in routers.get(user, [])]
            report = owner_report(end - WEEK, end, schedule.zone, theirs)
            notification_id = str(uuid.uuid4())
            notifications.append((notification_id, user, TYPE, "email", title(report),
                                  message(report), "pending", email,
                                  orjson.dumps(report).decode(), None, self._now))
            claims.append((user, end, notification_id, len(theirs)))
        async with self._db.transaction() as cur:
            made = await reports_db.claim(cur, claims)
            await store_many(cur, [n for n in notifications if n[1] in made])
        self.made += len(made)
        self.routers += sum(routers for user, _, _, routers in claims if user in made)

    async def _weeks(self, macs: list[str], start: datetime, end: datetime
                     ) -> dict[str, dict]:
        """The figures of `macs` in [start, end), by MAC."""
        weeks: dict[str, dict] = {}
        for first in range(0, len(macs), MACS_A_STATEMENT):
            chunk = macs[first:first + MACS_A_STATEMENT]
            rows = await reports_db.week_rows(self._db, chunk, start, end)
            weeks |= {week["mac"]: week
                      for week in router_weeks(rows, chunk, end, self._known_names or {})}
        return weeks

