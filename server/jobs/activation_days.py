"""The activation-days job: every hour, each UTC day of activations older than DETAIL_DAYS
rolled up into one row per router and address (server/db/activation_days.py: the rows and
the watermark in one transaction), then that day's partitions of `activations` dropped as
retention drops them (detached concurrently; under retention's lock, so the two never
detach the same partition at once). The access reports read the rolled days; the last
DETAIL_DAYS stay one row per call, which `router-backend status` (the last week) and
generation (where a router called from) read."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from server.db import activation_days
from server.db.pool import Database
from server.db import jobs as ledger
from server.jobs.retention import trim_table
from server.timestamps import utc_midnight

ACTIVATION_DAYS_CRON_SCHEDULE = "27 * * * *"
DETAIL_DAYS = 8   # more than status's week of silence (server/db/status.py SILENT_DAYS)
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
