"""Activations rolled up by UTC day (migration 0019): the statements of the `activation-days`
job (server/jobs/activation_days.py: a day's rows a range of routers a statement, then the
watermark moved) and the watermark every reader of activations uses.

`activation_rollup.detail_from`: activations before it are in `activation_days` (one row per
router, day and address), from it on in `activations` (one row per call). Readers split
their range there (DETAIL_FROM), so each day is read from exactly one of the two."""

from __future__ import annotations

from datetime import datetime

from server.db.pool import Database

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

# A day is rolled up ROUTERS_A_STATEMENT routers at a time, in MAC order, each router's
# rows whole in one statement; then the watermark is moved past it. Readers read the day
# one by one until then; a roll cut short is done again by the next run, the routers rolled
# already skipped (their rows conflict). In one statement, a day of 10 million activations
# (35,000 routers polling every 5 minutes) took 4.0 s (bench/activation_roll.py): from
# about 266,000 routers it would outlast the statements' timeout (DB_TIMEOUT_SECONDS) and
# never be rolled.
ROUTERS_A_STATEMENT = 10_000
_BATCH_END = ("SELECT mac FROM routers WHERE %(after)s::macaddr IS NULL OR mac > %(after)s "
              "ORDER BY mac OFFSET %(routers)s - 1 LIMIT 1")
_ROLL_ROUTERS = """
INSERT INTO activation_days (mac, day, address, activations, first_seen, last_seen)
SELECT mac, %(day)s, address, count(*), min(activated_at), max(activated_at)
FROM activations WHERE activated_at >= %(day)s AND activated_at < %(next)s
  AND (%(after)s::macaddr IS NULL OR mac > %(after)s)
  AND (%(upto)s::macaddr IS NULL OR mac <= %(upto)s)
GROUP BY mac, address
ON CONFLICT DO NOTHING"""
_MOVE_WATERMARK = ("UPDATE activation_rollup SET detail_from = %(next)s "
                   "WHERE detail_from < %(next)s")


async def detail_from(db: Database) -> datetime:
    return (await db.fetchone(f"SELECT {DETAIL_FROM_READ}"))[0]


async def oldest_detail(db: Database, before: datetime) -> datetime | None:
    return (await db.fetchone(_OLDEST_DETAIL, {"before": before}))[0]


async def roll_day(db: Database, day: datetime, next_day: datetime) -> int:
    """Roll [day, next_day) up, the MAC range of ROUTERS_A_STATEMENT registered routers a
    statement (the last range open-ended: a MAC no longer registered is rolled too); the
    (router, address) rows written."""
    written, after = 0, None
    while True:
        end = await db.fetchone(_BATCH_END, {"after": after, "routers": ROUTERS_A_STATEMENT})
        upto = end[0] if end else None
        written += await db.execute(_ROLL_ROUTERS, {"day": day, "next": next_day,
                                                    "after": after, "upto": upto})
        if upto is None:
            break
        after = upto
    await db.execute(_MOVE_WATERMARK, {"next": next_day})
    return written
