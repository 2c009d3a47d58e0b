"""How the service writes a moment: ISO 8601 in UTC with a `Z` (answers, reports, listings);
the UTC day a moment falls in; the interval between a cron schedule's ticks."""

from __future__ import annotations

from datetime import datetime, timezone

from cronsim import CronSim


def iso_utc(moment: datetime | None, timespec: str = "auto") -> str | None:
    """`2026-11-22T08:41:00.123456Z` (timespec as datetime.isoformat's); None for None."""
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat(timespec=timespec).replace("+00:00", "Z")


def utc_midnight(moment: datetime) -> datetime:
    """The first instant of the UTC day `moment` falls in."""
    return moment.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)


def cron_interval_seconds(spec: str) -> float:
    """Seconds between the next two ticks of a cron spec (UTC)."""
    ticks = CronSim(spec, datetime.now(timezone.utc))
    first = next(ticks)
    return (next(ticks) - first).total_seconds()
