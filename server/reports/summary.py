"""One router's day or week as its owner's frontend asks for it (`GET /api/owners/...`):
the figures of the weekly report (figures.py), ending now, from when it is theirs."""

from __future__ import annotations

from datetime import datetime, timedelta

from server.db.pool import Database
from server.reports import sql as reports_db
from server.reports.figures import ownership_start, router_weeks
from server.reports.schedule import WEEK
from server.telemetry.summary import ALERTS_LISTED_DAYS

PERIODS = {"week": WEEK, "day": timedelta(days=1)}
LISTED_DAYS = ALERTS_LISTED_DAYS  # how far back a router's alerts and sightings are listed


async def router_summary(db: Database, names: dict[int, str], mac: str,
                         owner_since: datetime | None, period: str, now: datetime) -> dict:
    start = ownership_start(now - PERIODS[period], now, owner_since)
    [week] = router_weeks(await reports_db.week_rows(db, [mac], start, now), [mac], now,
                          names)
    return {"period": {"name": period, "start": start.isoformat(), "end": now.isoformat()},
            **week}


def listed_since(now: datetime, owner_since: datetime | None) -> datetime:
    """From when a router's alerts and sightings are listed for its owner."""
    return ownership_start(now - timedelta(days=LISTED_DAYS), now, owner_since)
