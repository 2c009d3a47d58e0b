"""The fleet at a glance, the part read from tables several capabilities share (routers,
activations, jobs, telemetry counts); server/status.py adds each capability's own."""

from __future__ import annotations

from server.db.activation_days import last_rolled_contact
from server.db.pool import Database

SILENT_DAYS = 7      # "silent": registered for longer and no contact in that time
LISTED = 5           # examples shown of routers

# Each router's newest poll, read newest partition first on the primary key (mac,
# activated_at, id) of activations, stopping at the first row (else the rolled-up days', the
# newest day first): some 20 µs a router, where counting the distinct routers of a day of
# activations took 5 times as long (docs/console.md).
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
        {last_rolled_contact("r.mac")}) AS seen
      FROM routers r) last"""
LAST_POLL_AGES = ("within an hour", "within a day", f"within {SILENT_DAYS} days",
                  f"over {SILENT_DAYS} days ago", "never")

_LAST_PREPROCESS = """
SELECT status, started_at, finished_at, error FROM job_runs WHERE job = 'rulepreprocess'
ORDER BY id DESC LIMIT 1"""

# A job's runs that finished in the last hour: how many, the slowest, and how many took
# longer than its schedule's interval (a run then overlaps the next tick).
_RUNS_LAST_HOUR = """
SELECT count(*), coalesce(max(extract(epoch FROM finished_at - started_at)), 0)::float,
       count(*) FILTER (WHERE finished_at - started_at > %(interval)s * interval '1 second')
FROM job_runs WHERE job = %(job)s AND finished_at > now() - interval '1 hour'"""

_TELEMETRY = """
SELECT kind, sum(accepted), sum(rejected) FROM telemetry_minutes
WHERE minute > now() - interval '1 hour' GROUP BY kind"""

# Routers registered before MACs had to be unicast (a multicast or broadcast MAC is refused
# since; the rows are left alone, and named).
_NOT_UNICAST = f"""SELECT mac::text FROM routers
WHERE substr(mac::text, 2, 1) NOT IN ('0', '2', '4', '6', '8', 'a', 'c', 'e')
ORDER BY mac LIMIT {LISTED}"""
_NOT_UNICAST_COUNT = """SELECT count(*) FROM routers
WHERE substr(mac::text, 2, 1) NOT IN ('0', '2', '4', '6', '8', 'a', 'c', 'e')"""


async def shared_status(db: Database) -> dict:
    registered, *ages, silent = await db.fetchone(ROUTERS_SEEN)
    last = await db.fetchone(_LAST_PREPROCESS)
    telemetry = {kind: {"accepted": int(accepted), "rejected": int(rejected)}
                 for kind, accepted, rejected in await db.fetchall(_TELEMETRY)}
    return {
        "routers": {"registered": registered, "seen_last_day": ages[0] + ages[1],
                    "silent_over_a_week": silent,
                    "not_unicast": (await db.fetchone(_NOT_UNICAST_COUNT))[0],
                    "not_unicast_listed": [mac for (mac,) in await db.fetchall(_NOT_UNICAST)],
                    "by_last_poll": dict(zip(LAST_POLL_AGES, ages))},
        "last_preprocess": None if last is None else {
            "status": last[0], "started_at": last[1], "finished_at": last[2], "error": last[3]},
        "telemetry_last_hour": {kind: telemetry.get(kind, {"accepted": 0, "rejected": 0})
                                for kind in ("events", "cfm")},
    }


async def runs_last_hour(db: Database, job: str, interval_seconds: float) -> dict:
    runs, slowest, over = await db.fetchrow(_RUNS_LAST_HOUR, {"job": job,
                                                              "interval": interval_seconds})
    return {"runs": runs, "slowest_seconds": round(slowest, 1),
            "longer_than_interval": over, "interval_seconds": interval_seconds}
