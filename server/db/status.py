"""The fleet at a glance, for `router-backend status`: one read-only query per part."""

from __future__ import annotations

from server.db.pool import Database

SILENT_DAYS = 7      # "silent": registered for longer and no contact in that time
OVERDUE = "1 hour"   # "overdue": due longer than this (generation is falling behind)
LISTED = 5           # examples shown of failing routers

ROUTERS_SEEN = f"""
SELECT (SELECT count(*) FROM routers),
       (SELECT count(DISTINCT mac) FROM activations
        WHERE activated_at > now() - interval '1 day' AND activated_at <= now()),
       (SELECT count(*) FROM routers r WHERE r.registered_at < now() - interval '{SILENT_DAYS} days'
        AND NOT EXISTS (SELECT 1 FROM activations a WHERE a.mac = r.mac
                        AND a.activated_at > now() - interval '{SILENT_DAYS} days'
                        AND a.activated_at <= now()))"""

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


async def fleet_status(db: Database) -> dict:
    registered, seen_day, silent = await db.fetchone(ROUTERS_SEEN)
    reporting, behind, failed = await db.fetchone(_APPLIED)
    claimed, due, overdue, failing = await db.fetchone(_QUEUE)
    last = await db.fetchone(_LAST_PREPROCESS)
    telemetry = {kind: {"accepted": int(accepted), "rejected": int(rejected)}
                 for kind, accepted, rejected in await db.fetchall(_TELEMETRY)}
    notifications_failed, notifications_pending = await db.fetchone(_NOTIFICATIONS)
    return {
        "routers": {"registered": registered, "seen_last_day": seen_day,
                    "silent_over_a_week": silent},
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
    }
