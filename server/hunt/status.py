"""The hunt index at a glance, for `router-backend status` and the console's fleet page."""

from __future__ import annotations

from server.db.pool import Database

LISTED = 5           # examples shown of routers over their budget

# The hunt index: its packed days, and the routers past their daily budget of postings
# (HUNT_POSTINGS_PER_ROUTER_DAY) today or yesterday.
_HUNT_PACKED = """SELECT count(*), coalesce(sum(postings), 0)::bigint,
       coalesce(sum(bytes), 0)::bigint, max(day) FROM hunt_packed_days"""
_HUNT_SINCE = "date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 day'"
_HUNT_OVER_BUDGET = f"""SELECT count(DISTINCT mac), coalesce(sum(unindexed), 0)::bigint
FROM hunt_budgets WHERE unindexed > 0 AND day >= {_HUNT_SINCE}"""
_HUNT_OVER_BUDGET_LISTED = f"""SELECT mac::text, day, postings, unindexed FROM hunt_budgets
WHERE unindexed > 0 AND day >= {_HUNT_SINCE} ORDER BY unindexed DESC, mac LIMIT {LISTED}"""


# Uploads the hunt indexer has not read yet (server/hunt/indexer.py), and the oldest's age.
_HUNT_PENDING = """SELECT count(*), coalesce(extract(epoch FROM clock_timestamp()
    - min(written_at)), 0)::float FROM hunt_pending"""


async def hunt_status(db: Database) -> dict:
    days, postings, size, last = await db.fetchrow(_HUNT_PACKED)
    routers, unindexed = await db.fetchrow(_HUNT_OVER_BUDGET)
    pending, oldest = await db.fetchrow(_HUNT_PENDING)
    return {"pending_uploads": pending, "oldest_pending_seconds": round(oldest, 1),
            "packed_days": days, "packed_postings": postings, "packed_bytes": size,
            "last_packed_day": last, "over_budget_routers": routers,
            "unindexed_records": unindexed,
            "over_budget": [{"mac": mac, "day": day, "postings": posted, "unindexed": left_out}
                            for mac, day, posted, left_out
                            in await db.fetchall(_HUNT_OVER_BUDGET_LISTED)]}
