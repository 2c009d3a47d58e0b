"""The fleet at a glance, for `router-backend status`: one read-only query per part."""

from __future__ import annotations

from server.db.pool import Database

SILENT_DAYS = 7      # "silent": registered for longer and no contact in that time
OVERDUE = "1 hour"   # "overdue": due longer than this (generation is falling behind)
LISTED = 5           # examples shown of failing routers

# Each router's newest poll, read newest partition first on the primary key (mac,
# activated_at, id) of activations, stopping at the first row (the rolled-up days when there
# is none): some 20 µs a router, where counting the distinct routers of a day of activations
# took 5 times as long (docs/console.md).
ROUTERS_SEEN = f"""
SELECT count(*),
       count(*) FILTER (WHERE seen > now() - interval '1 hour'),
       count(*) FILTER (WHERE seen <= now() - interval '1 hour'
                        AND seen > now() - interval '1 day'),
       count(*) FILTER (WHERE seen <= now() - interval '1 day'
                        AND seen > now() - interval '{SILENT_DAYS} days'),
       count(*) FILTER (WHERE seen <= now() - interval '{SILENT_DAYS} days'),
       count(*) FILTER (WHERE seen IS NULL),
       count(*) FILTER (WHERE registered_at < now() - interval '{SILENT_DAYS} days'
                        AND (seen IS NULL OR seen <= now() - interval '{SILENT_DAYS} days'))
FROM (SELECT r.registered_at, coalesce(
        (SELECT activated_at FROM activations a
         WHERE a.mac = r.mac AND a.activated_at <= now()
         ORDER BY a.activated_at DESC LIMIT 1),
        (SELECT max(last_seen) FROM activation_days d WHERE d.mac = r.mac)) AS seen
      FROM routers r) last"""
LAST_POLL_AGES = ("within an hour", "within a day", f"within {SILENT_DAYS} days",
                  f"over {SILENT_DAYS} days ago", "never")

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

_LAST_PREPROCESS = """
SELECT status, started_at, finished_at, error FROM job_runs WHERE job = 'rulepreprocess'
ORDER BY id DESC LIMIT 1"""

_TELEMETRY = """
SELECT kind, sum(accepted), sum(rejected) FROM telemetry_minutes
WHERE minute > now() - interval '1 hour' GROUP BY kind"""

_NOTIFICATIONS = """
SELECT count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'pending')
FROM notifications WHERE status <> 'sent'"""


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
    days, postings, size, last = await db.fetchone(_HUNT_PACKED)
    routers, unindexed = await db.fetchone(_HUNT_OVER_BUDGET)
    pending, oldest = await db.fetchone(_HUNT_PENDING)
    return {"pending_uploads": pending, "oldest_pending_seconds": round(oldest, 1),
            "packed_days": days, "packed_postings": postings, "packed_bytes": size,
            "last_packed_day": last, "over_budget_routers": routers,
            "unindexed_values": unindexed,
            "over_budget": [{"mac": mac, "day": day, "postings": posted, "unindexed": left_out}
                            for mac, day, posted, left_out
                            in await db.fetchall(_HUNT_OVER_BUDGET_LISTED)]}


# Routers registered before MACs had to be unicast (a multicast or broadcast MAC is refused
# since; the rows are left alone, and named).
_NOT_UNICAST = f"""SELECT mac::text FROM routers
WHERE substr(mac::text, 2, 1) NOT IN ('0', '2', '4', '6', '8', 'a', 'c', 'e')
ORDER BY mac LIMIT {LISTED}"""
_NOT_UNICAST_COUNT = """SELECT count(*) FROM routers
WHERE substr(mac::text, 2, 1) NOT IN ('0', '2', '4', '6', '8', 'a', 'c', 'e')"""


async def fleet_status(db: Database) -> dict:
    registered, *ages, silent = await db.fetchone(ROUTERS_SEEN)
    reporting, behind, failed = await db.fetchone(_APPLIED)
    claimed, due, overdue, failing = await db.fetchone(_QUEUE)
    last = await db.fetchone(_LAST_PREPROCESS)
    telemetry = {kind: {"accepted": int(accepted), "rejected": int(rejected)}
                 for kind, accepted, rejected in await db.fetchall(_TELEMETRY)}
    notifications_failed, notifications_pending = await db.fetchone(_NOTIFICATIONS)
    return {
        "routers": {"registered": registered, "seen_last_day": ages[0] + ages[1],
                    "silent_over_a_week": silent,
                    "not_unicast": (await db.fetchone(_NOT_UNICAST_COUNT))[0],
                    "not_unicast_listed": [mac for (mac,) in await db.fetchall(_NOT_UNICAST)],
                    "by_last_poll": dict(zip(LAST_POLL_AGES, ages))},
        "applied": {"reporting": reporting, "behind_current_payloads": behind,
                    "failed_to_load": failed,
                    "failures": [{"mac": mac, "reported_at": at, "detail": detail}
                                 for mac, at, detail in await db.fetchall(_APPLY_FAILURES)]},
        "generation_queue": {"claimed": claimed, "due": due, "overdue": overdue,
                             "failing": failing,
                             "failures": [{"mac": mac, "attempts": attempts, "last_error": error}
                                          for mac, attempts, error
                                          in await db.fetchall(_QUEUE_FAILURES)]},
        "last_preprocess": None if last is None else {
            "status": last[0], "started_at": last[1], "finished_at": last[2], "error": last[3]},
        "telemetry_last_hour": {kind: telemetry.get(kind, {"accepted": 0, "rejected": 0})
                                for kind in ("events", "cfm")},
        "notifications": {"failed": notifications_failed, "pending": notifications_pending},
        "hunt_index": await hunt_status(db),
    }
