"""The generation queue in the database, and the telemetry summary generation reads.

Claims are leases: `claimed_by`/`claimed_until` set in the same statement that picks due
routers with FOR UPDATE SKIP LOCKED. A worker renews the lease when it starts a router (and
gives up the router if the lease was lost), and the result is written together with the queue
update in one transaction, only while the lease is still its own.
"""

from __future__ import annotations

import ipaddress
from datetime import timedelta

import aiopg

from engine.generate import TelemetrySummary
from server.db.pool import Database, execute
from server.db.rules import store_payloads

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

_RELEASE = """
UPDATE generation_queue SET claimed_by = NULL, claimed_until = NULL
WHERE mac = %(mac)s AND claimed_by = %(me)s"""

_COMPLETE = """
UPDATE generation_queue SET claimed_by = NULL, claimed_until = NULL, generated_at = now(),
    next_due_at = now() + %(interval)s, generation_count = generation_count + 1,
    attempts = 0, last_error = NULL, last_seconds = %(seconds)s
WHERE mac = %(mac)s AND claimed_by = %(me)s AND claimed_until >= now()
RETURNING mac"""

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


async def release(db: Database, me: str, mac: str) -> None:
    await db.execute(_RELEASE, {"me": me, "mac": mac})


async def complete(db: Database, me: str, mac: str, payloads: dict[str, tuple[bytes, str]],
                   interval: timedelta, seconds: float) -> None:
    """Store the payloads and reschedule the router, in one transaction, if still ours."""
    async with db.transaction() as cur:
        await execute(cur, _COMPLETE, {"me": me, "mac": mac, "interval": interval,
                                       "seconds": seconds})
        if await cur.fetchone() is None:
            raise LeaseLost(f"lease on {mac} lost before its result was stored")
        await store_payloads(cur, mac, payloads)


async def fail(db: Database, me: str, mac: str, interval: timedelta, error: str) -> None:
    """Retry later with backoff (1, 2, 4 ... minutes, at most the normal interval)."""
    await db.execute(_FAIL, {"me": me, "mac": mac, "interval": interval, "error": error[:500]})


async def queue_depth(db: Database) -> int:
    row = await db.fetchone("SELECT count(*) FROM generation_queue WHERE next_due_at <= now()")
    return row[0]


def is_external(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_global and not ip.is_multicast


async def telemetry_summary(db: Database, mac: str, window: timedelta,
                            block_severity: int) -> TelemetrySummary:
    """What the router's telemetry of the last `window` says, read newest-first and bounded."""
    async with db.cursor() as cur:
        return TelemetrySummary(
            fired_sids=await _column(cur, _FIRED, mac, window, MAX_FIRED_SIDS),
            app_protos=await _column(cur, _APP_PROTOS, mac, window, TOP_FLOW_VALUES),
            dest_ports=await _column(cur, _DEST_PORTS, mac, window, TOP_FLOW_VALUES),
            alert_endpoints=await _alert_endpoints(cur, mac, window, block_severity))


def _recent(table: str, columns: str) -> str:
    return (f"(SELECT {columns} FROM {table} WHERE mac = %(mac)s ORDER BY id DESC "
            f"LIMIT {RECENT_ROWS}) recent WHERE received_at > now() - %(window)s")


_FIRED = (f"SELECT DISTINCT signature_id FROM "
          f"{_recent('ids_events', 'signature_id, received_at')} "
          f"AND signature_id IS NOT NULL ORDER BY signature_id LIMIT %(limit)s")
_APP_PROTOS = (f"SELECT app_proto FROM {_recent('cfm_records', 'app_proto, received_at')} "
               f"AND app_proto IS NOT NULL AND app_proto <> 'failed' GROUP BY app_proto "
               f"ORDER BY count(*) DESC, app_proto LIMIT %(limit)s")
_DEST_PORTS = (f"SELECT dest_port FROM {_recent('cfm_records', 'dest_port, received_at')} "
               f"AND dest_port IS NOT NULL GROUP BY dest_port "
               f"ORDER BY count(*) DESC, dest_port LIMIT %(limit)s")
_ALERTS = (f"SELECT host(src_ip), host(dest_ip), signature_id, min(severity), count(*) FROM "
           f"{_recent('ids_events', 'src_ip, dest_ip, signature_id, severity, received_at')} "
           f"AND severity <= %(severity)s AND signature_id IS NOT NULL "
           f"GROUP BY 1, 2, 3 ORDER BY count(*) DESC LIMIT %(limit)s")


async def _column(cur: aiopg.Cursor, statement: str, mac: str, window: timedelta,
                  limit: int) -> list:
    await execute(cur, statement, {"mac": mac, "window": window, "limit": limit})
    return [row[0] for row in await cur.fetchall()]


async def _alert_endpoints(cur: aiopg.Cursor, mac: str, window: timedelta,
                           block_severity: int) -> list[tuple[str, int, int, int]]:
    """The external endpoint of each high-severity alert: the source when it is external (an
    inbound attack), else the destination when that is (e.g. an outbound C2 connection)."""
    await execute(cur, _ALERTS, {"mac": mac, "window": window, "severity": block_severity,
                                 "limit": MAX_ALERT_ENDPOINTS})
    endpoints: dict[tuple[str, int], list[int]] = {}
    for src, dest, sid, severity, count in await cur.fetchall():
        address = next((a for a in (src, dest) if a and is_external(a)), None)
        if address is None:
            continue
        entry = endpoints.setdefault((address, sid), [severity, 0])
        entry[0] = min(entry[0], severity)
        entry[1] += count
    return [(address, sid, severity, count)
            for (address, sid), (severity, count) in endpoints.items()]
