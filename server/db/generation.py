"""The generation queue in the database, and the telemetry summary generation reads.

The queue is driven from the event loop (aiopg); a router's own reads and writes (lease
renewal with its telemetry summary, storing its payloads) run in the generation worker that
generates it (psycopg2), so they scale with the workers.

Claims are leases: `claimed_by`/`claimed_until` set in the same statement that picks due
routers with FOR UPDATE SKIP LOCKED. A worker renews the lease when it starts a router (and
gives up the router if the lease was lost), and the result is written together with the queue
update in one transaction, only while the lease is still its own.
"""

from __future__ import annotations

import functools
import ipaddress
from datetime import timedelta

from engine.generate import TelemetrySummary
from server.db.pool import Database, execute
from server.db.rules import payload_params, upsert_statement

RECENT_ROWS = 50_000      # bound on rows read per router and table, newest first
MAX_FIRED_SIDS = 2_000
TOP_FLOW_VALUES = 32
MAX_ALERT_ENDPOINTS = 5_000

_CLAIM = """
UPDATE generation_queue q SET claimed_by = %(me)s, claimed_until = now() + %(lease)s
WHERE q.mac IN (
    SELECT mac FROM generation_queue
    WHERE next_due_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
    ORDER BY (generated_at IS NOT NULL), next_due_at
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING q.mac::text"""

_CLAIM_ONE = """
UPDATE generation_queue SET claimed_by = %(me)s, claimed_until = now() + %(lease)s
WHERE mac = %(mac)s AND (claimed_until IS NULL OR claimed_until < now() OR claimed_by = %(me)s)
RETURNING mac"""

# Keep a living process's claims alive; never shortens a lease, never revives an expired one.
_RENEW = """
UPDATE generation_queue SET claimed_until = greatest(claimed_until, now() + %(lease)s)
WHERE claimed_by = %(me)s AND claimed_until >= now()"""

_RELEASE = """
UPDATE generation_queue SET claimed_by = NULL, claimed_until = NULL
WHERE mac = %(mac)s AND claimed_by = %(me)s"""

# Reschedule and store in one statement (atomic without an explicit transaction): when the
# lease is no longer ours, `done` is empty and nothing is written.
_COMPLETE = """
WITH done AS (
    UPDATE generation_queue SET claimed_by = NULL, claimed_until = NULL, generated_at = now(),
        next_due_at = now() + %(interval)s, generation_count = generation_count + 1,
        attempts = 0, last_error = NULL, last_seconds = %(seconds)s
    WHERE mac = %(mac)s AND claimed_by = %(me)s AND claimed_until >= now()
    RETURNING mac)
""" + upsert_statement(("firewall", "ids"), source="done")

_FAIL = """
UPDATE generation_queue SET claimed_by = NULL, claimed_until = NULL,
    next_due_at = now() + least(%(interval)s, interval '1 minute' * power(2, attempts)),
    attempts = attempts + 1, last_error = %(error)s
WHERE mac = %(mac)s AND claimed_by = %(me)s"""


class LeaseLost(Exception):
    """Another process holds this router now (our lease expired); the result is dropped."""


async def claim_due(db: Database, me: str, limit: int, lease: timedelta) -> list[str]:
    async with db.cursor() as cur:
        await execute(cur, _CLAIM, {"me": me, "lease": lease, "limit": limit})
        return [row[0] for row in await cur.fetchall()]


async def claim_router(db: Database, me: str, mac: str, lease: timedelta) -> bool:
    """Take (or renew) the lease on one router; False when another process holds it."""
    async with db.cursor() as cur:
        await execute(cur, _CLAIM_ONE, {"me": me, "mac": mac, "lease": lease})
        return await cur.fetchone() is not None


async def renew_claims(db: Database, me: str, lease: timedelta) -> int:
    return await db.execute(_RENEW, {"me": me, "lease": lease})


async def release(db: Database, me: str, mac: str) -> None:
    await db.execute(_RELEASE, {"me": me, "mac": mac})


def complete(cur, me: str, mac: str, payloads: dict[str, tuple[bytes, str]],
             interval: timedelta, seconds: float) -> None:
    """Store both payloads and reschedule the router, atomically, if the lease is still ours.
    Synchronous (psycopg2): it runs in the generation worker process."""
    cur.execute(_COMPLETE, {**payload_params(mac, payloads), "me": me, "interval": interval,
                            "seconds": seconds})
    if cur.rowcount != 1:
        raise LeaseLost(f"lease on {mac} lost before its result was stored")


async def fail(db: Database, me: str, mac: str, interval: timedelta, error: str) -> None:
    """Retry later with backoff (1, 2, 4 ... minutes, at most the normal interval)."""
    await db.execute(_FAIL, {"me": me, "mac": mac, "interval": interval, "error": error[:500]})


@functools.lru_cache(maxsize=65536)
def is_external(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_global and not ip.is_multicast


def renew_and_summarise(cur, me: str, mac: str, lease: timedelta, window: timedelta,
                        block_severity: int) -> TelemetrySummary:
    """Renew the lease on `mac` and read what its telemetry of the last `window` says (newest
    first, bounded), in one round trip. LeaseLost when another process holds the router.
    Synchronous (psycopg2): it runs in the generation worker process."""
    cur.execute(_RENEW_AND_SUMMARISE, {
        "me": me, "mac": mac, "lease": lease, "window": window, "severity": block_severity,
        "sids": MAX_FIRED_SIDS, "top": TOP_FLOW_VALUES, "alerts": MAX_ALERT_ENDPOINTS})
    renewed, fired, apps, ports, alerts = cur.fetchone()
    if not renewed:
        raise LeaseLost(f"{mac} is held by another process")
    return TelemetrySummary(fired_sids=fired or [], app_protos=apps or [],
                            dest_ports=ports or [],
                            alert_endpoints=_alert_endpoints(alerts or []))


def _recent(table: str, columns: str) -> str:
    return (f"(SELECT {columns} FROM {table} WHERE mac = %(mac)s ORDER BY id DESC "
            f"LIMIT {RECENT_ROWS}) recent WHERE received_at > now() - %(window)s")


_RENEW_AND_SUMMARISE = f"""WITH renewed AS ({_CLAIM_ONE}) SELECT
 (SELECT count(*) FROM renewed),
 (SELECT array_agg(signature_id) FROM (SELECT DISTINCT signature_id FROM
   {_recent('ids_events', 'signature_id, received_at')} AND signature_id IS NOT NULL
   ORDER BY signature_id LIMIT %(sids)s) fired),
 (SELECT array_agg(app_proto) FROM (SELECT app_proto FROM
   {_recent('cfm_records', 'app_proto, received_at')}
   AND app_proto IS NOT NULL AND app_proto <> 'failed' GROUP BY app_proto
   ORDER BY count(*) DESC, app_proto LIMIT %(top)s) apps),
 (SELECT array_agg(dest_port) FROM (SELECT dest_port FROM
   {_recent('cfm_records', 'dest_port, received_at')} AND dest_port IS NOT NULL
   GROUP BY dest_port ORDER BY count(*) DESC, dest_port LIMIT %(top)s) ports),
 (SELECT json_agg(json_build_array(src, dest, sid, severity, n)) FROM (
   SELECT host(src_ip) AS src, host(dest_ip) AS dest, signature_id AS sid,
          min(severity) AS severity, count(*) AS n FROM
   {_recent('ids_events', 'src_ip, dest_ip, signature_id, severity, received_at')}
   AND severity <= %(severity)s AND signature_id IS NOT NULL
   GROUP BY 1, 2, 3 ORDER BY count(*) DESC LIMIT %(alerts)s) alerts)"""


def _alert_endpoints(rows: list) -> list[tuple[str, int, int, int]]:
    """The external endpoint of each high-severity alert: the source when it is external (an
    inbound attack), else the destination when that is (e.g. an outbound C2 connection)."""
    endpoints: dict[tuple[str, int], list[int]] = {}
    for src, dest, sid, severity, count in rows:
        address = next((a for a in (src, dest) if a and is_external(a)), None)
        if address is None:
            continue
        entry = endpoints.setdefault((address, sid), [severity, 0])
        entry[0] = min(entry[0], severity)
        entry[1] += count
    return [(address, sid, severity, count)
            for (address, sid), (severity, count) in endpoints.items()]


_QUEUE_STATE = """
SELECT count(*) FILTER (WHERE claimed_until >= now()),
       count(*) FILTER (WHERE next_due_at <= now() AND (claimed_until IS NULL
                                                       OR claimed_until < now())),
       count(*)
FROM generation_queue"""


async def queue_state(db: Database) -> dict[str, int]:
    """Routers being generated now, due and waiting, and in the queue at all."""
    claimed, due, total = await db.fetchone(_QUEUE_STATE)
    return {"claimed": claimed, "due": due, "total": total}
