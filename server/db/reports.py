"""Router access reports over `activations` and `activation_days`, streamed from a
server-side cursor so that millions of rows cost no memory: rows come back in pages of
FETCH_ROWS."""

from __future__ import annotations

from datetime import datetime
from typing import AsyncIterator

from server.db.activation_days import DETAIL_FROM
from server.db.pool import Database, execute

FETCH_ROWS = 5_000

# Both group by the macaddr itself (hashed, cheaper than its text) and by UTC day, so that
# PostgreSQL hash-aggregates the month's partitions into (router, day) pairs instead of
# sorting every row: over 5 million activations the access-days report takes a quarter of
# the time of a count(DISTINCT ...) per router (bench/partitions.py).

# Days before the watermark come rolled up from activation_days, the others one by one from
# activations (migration 0019, server/db/activation_days.py).
_ROUTER_DAYS = f"""
    SELECT (activated_at AT TIME ZONE 'UTC')::date AS day, mac, count(*) AS activations,
           min(activated_at) AS first_seen, max(activated_at) AS last_seen
    FROM activations WHERE activated_at >= %(start)s AND activated_at < %(end)s
      AND activated_at >= {DETAIL_FROM}
    GROUP BY 1, 2
    UNION ALL
    SELECT (day AT TIME ZONE 'UTC')::date, mac, sum(activations), min(first_seen),
           max(last_seen)
    FROM activation_days WHERE day >= %(start)s AND day < %(end)s AND day < {DETAIL_FROM}
    GROUP BY 1, 2"""

# (UTC day, mac, activations, first, last) per router and day.
DAILY_ACTIVITY = f"""
SELECT day, mac::text, sum(activations)::bigint, min(first_seen), max(last_seen)
FROM ({_ROUTER_DAYS}) router_days GROUP BY day, mac ORDER BY day, mac"""

# (mac, distinct UTC days with an activation) per router.
ACCESS_DAYS = f"""
SELECT mac::text, count(DISTINCT day) FROM ({_ROUTER_DAYS}) router_days
GROUP BY mac ORDER BY mac"""


def daily_activity(db: Database, start: datetime, end: datetime) -> AsyncIterator[tuple]:
    """Per router and UTC day in [start, end): (day, mac, activations, first, last)."""
    return _stream(db, DAILY_ACTIVITY, {"start": start, "end": end})


def access_days(db: Database, start: datetime, end: datetime) -> AsyncIterator[tuple]:
    """Per router active in [start, end): (mac, number of UTC days with an activation)."""
    return _stream(db, ACCESS_DAYS, {"start": start, "end": end})


async def _stream(db: Database, statement: str, params: dict) -> AsyncIterator[tuple]:
    async with db.transaction() as cur:
        await execute(cur, f"DECLARE report NO SCROLL CURSOR FOR {statement}", params)
        while True:
            await execute(cur, f"FETCH {FETCH_ROWS} FROM report")
            rows = await cur.fetchall()
            if not rows:
                return
            for row in rows:
                yield row
