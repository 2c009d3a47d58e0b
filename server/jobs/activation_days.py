"""The activation-days job: every hour, each UTC day of activations before today rolled up
into one row per router and address (server/db/activation_days.py: the rows 10,000 routers
a statement, then the watermark), then that day's partitions of `activations` dropped as
retention drops them (detached concurrently; under retention's lock, so the two never
detach the same partition at once). Today's stay one row per call. Every reader (the access
reports, `router-backend status`, the console, generation's addresses a router called
from) reads the rolled days and today's rows alike: kept one by one for 8 days as they
were until 2026-11-29, a router polling every 5 minutes had 0.26 MB of them, 0.03 now."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from server.db import activation_days
from server.db.pool import Database
from server.db import jobs as ledger
from server.jobs.retention import trim_table
from server.timestamps import utc_midnight

ACTIVATION_DAYS_CRON_SCHEDULE = "27 * * * *"
DETAIL_DAYS = 0   # days before today kept one by one (0: yesterday rolled just past midnight)
DAY = timedelta(days=1)


async def roll_up_activations(db: Database, now: datetime | None = None) -> dict:
    cut = utc_midnight(now or datetime.now(timezone.utc)) - DETAIL_DAYS * DAY
    watermark = await activation_days.detail_from(db)
    oldest = await activation_days.oldest_detail(db, cut)
    day = max(watermark, utc_midnight(oldest) if oldest else cut)
    days, rows = 0, 0
    while day < cut:
        rows += await activation_days.roll_day(db, day, day + DAY)
        days += 1
        day += DAY
    if watermark < cut and not days:  # no activation before the cut: move the watermark
        await activation_days.roll_day(db, cut - DAY, cut)
    dropped = {}
    async with ledger.exclusive(db, "retention") as acquired:
        if acquired:
            dropped = await trim_table(db, "activations", await activation_days.detail_from(db))
    return {"days_rolled": days, "rows_written": rows, "detail_from": cut.isoformat(),
            "activations_removed": dropped}
