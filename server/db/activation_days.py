"""Activations rolled up by UTC day (migration 0019): the statements of the `activation-days`
job (server/jobs/activation_days.py) and the watermark every reader of activations uses.

`activation_rollup.detail_from`: activations before it are in `activation_days` (one row per
router, day and address), from it on in `activations` (one row per call). Readers split
their range there (DETAIL_FROM), so each day is read from exactly one of the two."""

from __future__ import annotations

from datetime import datetime

from server.db.pool import Database, execute

DETAIL_FROM = "(SELECT detail_from FROM activation_rollup)"
# As Python reads it: '-infinity' (nothing rolled up yet) has no datetime.
DETAIL_FROM_READ = "(SELECT greatest(detail_from, '0001-01-01 00:00+00') FROM activation_rollup)"



def last_rolled_contact(mac: str) -> str:
    """SQL: the newest last call of the router `mac` (a column or a parameter) among the
    rolled days: its newest day found first (partitions read newest first, stopping at the
    first row), then that day's rows alone. Ordering the rows by (day, last_seen) instead
    read every older partition after the first row, to know its day had no more."""
    return (f"(SELECT max(last_seen) FROM activation_days WHERE mac = {mac} AND day = "
            f"(SELECT max(day) FROM activation_days WHERE mac = {mac}))")


_OLDEST_DETAIL = "SELECT min(activated_at) FROM activations WHERE activated_at < %(before)s"

# One day rolled up and the watermark moved past it, in one transaction.
_ROLL_DAY = """
WITH rolled AS (
    INSERT INTO activation_days (mac, day, address, activations, first_seen, last_seen)
    SELECT mac, %(day)s, address, count(*), min(activated_at), max(activated_at)
    FROM activations WHERE activated_at >= %(day)s AND activated_at < %(next)s
    GROUP BY mac, address
    ON CONFLICT DO NOTHING RETURNING 1)
UPDATE activation_rollup SET detail_from = %(next)s WHERE detail_from < %(next)s
RETURNING (SELECT count(*) FROM rolled)"""


async def detail_from(db: Database) -> datetime:
    return (await db.fetchone(f"SELECT {DETAIL_FROM_READ}"))[0]


async def oldest_detail(db: Database, before: datetime) -> datetime | None:
    return (await db.fetchone(_OLDEST_DETAIL, {"before": before}))[0]


async def roll_day(db: Database, day: datetime, next_day: datetime) -> int:
    """Roll [day, next_day) up; the (router, address) rows written."""
    async with db.transaction() as cur:
        await execute(cur, _ROLL_DAY, {"day": day, "next": next_day})
        row = await cur.fetchone()
    return row[0] if row else 0
