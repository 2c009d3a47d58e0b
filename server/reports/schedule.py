"""When an owner's weekly report is due: a weekday and an hour of the owner's time zone
(`subscriptions owner MAC --weekly-at "mon 08:00" --zone Europe/Prague`; the default, for
an owner who chose nothing, is DEFAULT). A report covers the seven days before that moment.
Two reports of one owner are about a week apart, more than APART: after a change of
schedule to an earlier weekday, the next report comes at the first chosen moment more than
six days after the last one (the days between are in no report, or in two;
docs/notification-api.md)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, available_timezones

from server.refusal import Refusal

WEEK = timedelta(days=7)
# Two reports' ends are more than this apart: a week, less the hour a clock change takes.
APART = timedelta(days=6)
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_AT = re.compile(r"\s*([a-z]{3})\s+([0-9]{1,2})(?::00)?\s*")
MAX_ZONE = 64


class ScheduleInvalid(Refusal):
    """A weekday, hour or time zone that is not one."""


@dataclass(frozen=True)
class Schedule:
    weekly: bool = True
    weekday: int = 1        # ISO: 1 is Monday
    hour: int = 8
    zone: str = "UTC"

    @property
    def described(self) -> str:
        return f"{WEEKDAYS[self.weekday - 1]} {self.hour:02d}:00 {self.zone}"

    def last_moment(self, now: datetime) -> datetime:
        """The latest chosen moment at or before `now` (UTC), the end of the week it
        reports."""
        local = now.astimezone(ZoneInfo(self.zone))
        days_back = (local.isoweekday() - self.weekday) % 7
        day = (local - timedelta(days=days_back)).date()
        moment = _at(day, self.hour, self.zone)
        if moment > now:
            moment = _at(day - WEEK, self.hour, self.zone)
        return moment.astimezone(timezone.utc)

    def due(self, now: datetime, last_end: datetime | None) -> datetime | None:
        """The end of the week whose report is due at `now`, or None: off, or the last
        report of that week (APART)."""
        if not self.weekly:
            return None
        moment = self.last_moment(now)
        if last_end is not None and moment - last_end <= APART:
            return None
        return moment


DEFAULT = Schedule()


def _at(day, hour: int, zone: str) -> datetime:
    """`hour` o'clock of `day` in `zone`; an hour a clock change skips is the hour after."""
    local = datetime(day.year, day.month, day.day, hour, tzinfo=ZoneInfo(zone))
    round_trip = local.astimezone(timezone.utc).astimezone(ZoneInfo(zone))
    return local if round_trip.hour == hour else round_trip


def parse_at(text: str) -> tuple[int, int]:
    """`mon 08:00` (or `mon 8`): the ISO weekday and the hour."""
    found = _AT.fullmatch(text.lower())
    if found is None or found[1] not in WEEKDAYS or not 0 <= int(found[2]) <= 23:
        raise ScheduleInvalid(f"expected a weekday and an hour such as 'mon 08:00', "
                              f"got {text[:40]!r}")
    return WEEKDAYS.index(found[1]) + 1, int(found[2])


def checked_zone(name: str) -> str:
    """An IANA time zone name (Europe/Prague, UTC)."""
    if len(name) > MAX_ZONE or name not in _zones():
        raise ScheduleInvalid(f"not a time zone name: {name[:MAX_ZONE]!r} (e.g. Europe/Prague)")
    return name


@functools.cache
def _zones() -> frozenset[str]:
    return (frozenset(available_timezones()) | {"UTC"}) - {"localtime", "Factory"}
