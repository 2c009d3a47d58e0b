"""What an owner chose of their weekly report: whether they get one, and when (the operator's
`subscriptions owner MAC --weekly ...`, the frontend's API). A choice names only what it
changes; the rest stays as it was, or the default."""

from __future__ import annotations

import dataclasses

from server.db.pool import Database
from server.reports import sql as reports_db
from server.reports.schedule import DEFAULT, Schedule, checked_zone, parse_at


async def change_schedule(db: Database, user: str, weekly: bool | None = None,
                          at: str | None = None, zone: str | None = None) -> Schedule:
    """The owner's schedule with what is given changed, stored; ScheduleInvalid when `at`
    or `zone` is not one."""
    changes: dict = {}
    if weekly is not None:
        changes["weekly"] = weekly
    if at is not None:
        changes["weekday"], changes["hour"] = parse_at(at)
    if zone is not None:
        changes["zone"] = checked_zone(zone)
    schedule = dataclasses.replace(
        (await reports_db.schedules(db, [user])).get(user, DEFAULT), **changes)
    await reports_db.set_schedule(db, user, schedule)
    return schedule
