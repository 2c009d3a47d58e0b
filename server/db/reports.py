"""Router access reports over `activations`, streamed from a server-side cursor so that
millions of rows cost no memory: rows come back in pages of FETCH_ROWS."""

from __future__ import annotations

from datetime import datetime
from typing import AsyncIterator

from server.db.pool import Database, execute

FETCH_ROWS = 5_000

# Both group by the macaddr itself (hashed, cheaper than its text) and by UTC day, so that
# PostgreSQL hash-aggregates the month's partitions into (router, day) pairs instead of
# sorting every row: over 5 million activations the access-days report takes a quarter of
# the time of a count(DISTINCT ...) per router (ops/bench/partitions.py).

# (UTC day, mac, activations, first, last) per router and day.
DAILY_ACTIVITY = """
SELECT (activated_at AT TIME ZONE 'UTC')::date AS day, mac::text, count(*),
       min(activated_at), max(activated_at)
FROM activations WHERE activated_at >= %(start)s AND activated_at < %(end)s
GROUP BY day, mac ORDER BY day, mac"""

# (mac, distinct UTC days with an activation) per router.
ACCESS_DAYS = """
SELECT mac::text, count(*) FROM (
    SELECT mac, (activated_at AT TIME ZONE 'UTC')::date AS day
    FROM activations WHERE activated_at >= %(start)s AND activated_at < %(end)s
    GROUP BY mac, day) router_days
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
