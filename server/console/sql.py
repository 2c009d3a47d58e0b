"""What the console reads: one router's story (each part one statement on that router's keys,
so a page costs the same whatever the size of the fleet) and the fleet's hourly charts (from
the per-minute tallies, a few rows an hour whatever the size of the fleet)."""

from __future__ import annotations

from server.db.pool import Database
from server.generation.rules_sql import STORED_PAYLOADS
from server.telemetry.sql import alerts_in_window
from server.telemetry.summary import CONSOLE_DAYS

TOP = 10

_ROUTER = """
SELECT r.mac::text, r.registered_at, r.registered_by, r.note, r.registered_from,
       k.issued_at, k.issued_by, w.open_until
FROM routers r LEFT JOIN router_keys k USING (mac) LEFT JOIN enrollment_windows w USING (mac)
WHERE r.mac = %(mac)s"""

# Newest first from the primary key (mac, activated_at, id); older days are rolled up.
_LAST_POLL = """
SELECT * FROM (SELECT activated_at, host(address) FROM activations
               WHERE mac = %(mac)s AND activated_at <= now()
               ORDER BY activated_at DESC, id DESC LIMIT 1) detail
UNION ALL
SELECT * FROM (SELECT last_seen, host(address) FROM activation_days WHERE mac = %(mac)s
               AND day = (SELECT max(day) FROM activation_days WHERE mac = %(mac)s)
               ORDER BY last_seen DESC LIMIT 1) rolled
ORDER BY 1 DESC LIMIT 1"""

_APPLIED = """
SELECT ids_etag, firewall_etag, ok, detail, reported_at FROM router_applied WHERE mac = %(mac)s"""

_GENERATION = """
SELECT next_due_at, generated_at, generation_count, attempts, last_error, last_seconds,
       claimed_by, CASE WHEN claimed_until > now() THEN claimed_until END,
       declared_rules, declared_sets, declared_ja4
FROM generation_queue WHERE mac = %(mac)s"""

# Records by kind and upload time: a chunk's newest upload bounds the ones it holds.
_RECORDS = """
SELECT kind, coalesce(sum(n) FILTER (WHERE at > now() - interval '1 day'), 0),
       coalesce(sum(n), 0), max(at)
FROM telemetry_chunks, unnest(upload_times, upload_records) AS upload(at, n)
WHERE mac = %(mac)s AND received_at > now() - interval '7 days'
  AND at > now() - interval '7 days'
GROUP BY kind"""

_SIGNATURES = f"""
SELECT signature_id, min(severity),
       coalesce(sum(alerts) FILTER (WHERE hour > now() - interval '25 hours'), 0),
       sum(alerts), max(last_seen)
FROM {alerts_in_window(f"interval '{CONSOLE_DAYS} days'")} a
GROUP BY signature_id ORDER BY 4 DESC, 1 LIMIT {TOP}"""

_NEWEST_EVENTS = """
SELECT body FROM telemetry_chunks WHERE mac = %(mac)s AND kind = 'events'
ORDER BY received_at DESC, id DESC LIMIT 1"""

_OVERRIDES = """
SELECT id, action, selector, mac::text, note, created_at FROM rule_overrides
WHERE mac = %(mac)s OR mac IS NULL ORDER BY mac NULLS FIRST, id"""

_ALLOWED = """
SELECT id, network::text, mac::text, note, created_at FROM firewall_allowlist
WHERE mac = %(mac)s OR mac IS NULL ORDER BY mac NULLS FIRST, network, id"""


# The router page's statements by where Citus runs them: on the router's shard, or on the
# coordinator's own tables (tests/test_citus.py checks both).
ROUTER_PAGE_ON_ITS_SHARD = {"registration": _ROUTER, "last poll": _LAST_POLL,
                            "payloads": STORED_PAYLOADS, "applied": _APPLIED, "records": _RECORDS,
                            "signatures": _SIGNATURES, "newest alerts": _NEWEST_EVENTS}
ROUTER_PAGE_ON_THE_COORDINATOR = {"generation": _GENERATION, "overrides": _OVERRIDES,
                                  "allowlist": _ALLOWED}


async def router(db: Database, mac: str) -> tuple | None:
    """(mac, registered_at, registered_by, note, registered_from, key issued_at, key
    issued_by, enrollment open_until), or None when the router is not registered."""
    return await db.fetchone(_ROUTER, {"mac": mac})


async def last_poll(db: Database, mac: str) -> tuple | None:
    """(when, from which address) of the router's newest /rules/last_updated call."""
    return await db.fetchone(_LAST_POLL, {"mac": mac})


async def applied(db: Database, mac: str) -> tuple | None:
    return await db.fetchone(_APPLIED, {"mac": mac})


async def generation(db: Database, mac: str) -> tuple | None:
    return await db.fetchone(_GENERATION, {"mac": mac})


async def records(db: Database, mac: str) -> list[tuple]:
    """(kind, records in the last day, in the last 7 days, newest upload) per kind."""
    return await db.fetchall(_RECORDS, {"mac": mac})


async def signatures(db: Database, mac: str) -> list[tuple]:
    """(sid, most severe severity, alerts in the last day, in 7 days, last seen), the most
    alerted first (hourly summaries: an hour counts while any of it is in the window)."""
    return await db.fetchall(_SIGNATURES, {"mac": mac})


async def newest_events_chunk(db: Database, mac: str) -> bytes | None:
    row = await db.fetchone(_NEWEST_EVENTS, {"mac": mac})
    return None if row is None else bytes(row[0])


async def overrides(db: Database, mac: str) -> list[tuple]:
    """The fleet's overrides, then the router's: (id, action, selector, mac, note, created)."""
    return await db.fetchall(_OVERRIDES, {"mac": mac})


async def allowed(db: Database, mac: str) -> list[tuple]:
    """The fleet's allowlist, then the router's: (id, network, mac, note, created)."""
    return await db.fetchall(_ALLOWED, {"mac": mac})


_HOURS = "generate_series(date_trunc('hour', now()) - interval '23 hours', " \
         "date_trunc('hour', now()), interval '1 hour') AS hours(hour)"

_UPLOADS_PER_HOUR = f"""
SELECT hour, coalesce(uploads, 0), coalesce(accepted, 0)
FROM {_HOURS} LEFT JOIN (
    SELECT date_trunc('hour', minute) AS hour, sum(uploads) AS uploads,
           sum(accepted) AS accepted
    FROM telemetry_minutes WHERE minute >= date_trunc('hour', now()) - interval '23 hours'
    GROUP BY 1) counted USING (hour)
ORDER BY hour"""

_POLLS_PER_HOUR = f"""
SELECT hour, coalesce(polls, 0)
FROM {_HOURS} LEFT JOIN (
    SELECT date_trunc('hour', minute) AS hour, sum(polls) AS polls FROM poll_minutes
    WHERE minute >= date_trunc('hour', now()) - interval '23 hours'
    GROUP BY 1) counted USING (hour)
ORDER BY hour"""


async def uploads_per_hour(db: Database) -> list[tuple]:
    """(hour, uploads, records accepted) for each of the last 24 hours, the fleet's."""
    return await db.fetchall(_UPLOADS_PER_HOUR)


async def polls_per_hour(db: Database) -> list[tuple]:
    """(hour, /rules/last_updated calls) for each of the last 24 hours, the fleet's."""
    return await db.fetchall(_POLLS_PER_HOUR)
