"""The generation at a glance, for `router-backend status` and the console's fleet page: what
routers report of the payloads they loaded, and the generation queue."""

from __future__ import annotations

from server.db.pool import Database

OVERDUE = "1 hour"   # "overdue": due longer than this (generation is falling behind)
LISTED = 5           # examples shown of failing routers

_APPLIED = """
SELECT count(*),
       count(*) FILTER (WHERE a.ids_etag IS DISTINCT FROM r.ids_etag
                        OR a.firewall_etag IS DISTINCT FROM r.firewall_etag),
       count(*) FILTER (WHERE NOT a.ok)
FROM router_applied a LEFT JOIN router_rules r USING (mac)"""

_APPLY_FAILURES = f"""
SELECT mac::text, reported_at, detail FROM router_applied WHERE NOT ok
ORDER BY reported_at DESC LIMIT {LISTED}"""

_QUEUE = f"""
SELECT count(*) FILTER (WHERE claimed_until > now()),
       count(*) FILTER (WHERE next_due_at <= now()),
       count(*) FILTER (WHERE next_due_at <= now() - interval '{OVERDUE}'),
       count(*) FILTER (WHERE attempts > 0)
FROM generation_queue"""

_QUEUE_FAILURES = f"""
SELECT mac::text, attempts, last_error FROM generation_queue WHERE attempts > 0
ORDER BY attempts DESC, mac LIMIT {LISTED}"""


async def applied_status(db: Database) -> dict:
    reporting, behind, failed = await db.fetchrow(_APPLIED)
    return {"reporting": reporting, "behind_current_payloads": behind,
            "failed_to_load": failed,
            "failures": [{"mac": mac, "reported_at": at, "detail": detail}
                         for mac, at, detail in await db.fetchall(_APPLY_FAILURES)]}


async def queue_status(db: Database) -> dict:
    claimed, due, overdue, failing = await db.fetchrow(_QUEUE)
    return {"claimed": claimed, "due": due, "overdue": overdue, "failing": failing,
            "failures": [{"mac": mac, "attempts": attempts, "last_error": error}
                         for mac, attempts, error in await db.fetchall(_QUEUE_FAILURES)]}
