"""Router keys (table `router_keys`): only hashes, one per registered router."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from server.db.pool import Database, execute
from server.routers.sql import BUCKET_WAIT, KEY_CHANGED, UNDER_LIMIT, bucket_params, from_bucket
from server.db.tuning_changes import record


KEY_HASH = "SELECT key_hash FROM router_keys WHERE mac = %(mac)s"


async def key_hash_of(db: Database, mac: str) -> bytes | None:
    row = await db.fetchone(KEY_HASH, {"mac": mac})
    return bytes(row[0]) if row else None


# Enrollment in one statement (after the address bucket's lock, as for a registration):
# register the router when registration is open and the bucket is under its limit (and queue
# it for generation), then give it a key unless it has one or an operator's reset window for
# it has closed (a used window is removed). The router row a CTE inserts is not in the
# statement's snapshot of `routers`, hence `known`.
_ENROLL = f"""
WITH registered AS (
    INSERT INTO routers (mac, registered_by, registered_from)
    SELECT %(mac)s, 'auto', %(bucket)s WHERE %(open)s AND {UNDER_LIMIT}
    ON CONFLICT (mac) DO NOTHING RETURNING mac),
queued AS (
    INSERT INTO generation_queue (mac) SELECT mac FROM registered ON CONFLICT DO NOTHING),
known AS (
    SELECT mac FROM registered UNION ALL SELECT mac FROM routers WHERE mac = %(mac)s),
closed AS (
    SELECT 1 FROM enrollment_windows WHERE mac = %(mac)s AND open_until <= now()),
issued AS (
    INSERT INTO router_keys (mac, key_hash, issued_by)
    SELECT mac, %(hash)s, 'enrollment' FROM known WHERE NOT EXISTS (SELECT 1 FROM closed)
    ON CONFLICT (mac) DO NOTHING RETURNING mac),
used AS (
    DELETE FROM enrollment_windows WHERE mac IN (SELECT mac FROM issued))
SELECT EXISTS (SELECT 1 FROM known), EXISTS (SELECT 1 FROM registered),
       EXISTS (SELECT 1 FROM issued), EXISTS (SELECT 1 FROM closed), {BUCKET_WAIT},
       %(open)s AND {UNDER_LIMIT}"""


@dataclass(frozen=True)
class Enrollment:
    registered: bool   # the router is registered (now or before)
    new_router: bool   # registered by this enrollment
    issued: bool       # a key was issued (False: it has one already, or its window closed)
    window_closed: bool  # an operator's reset window for it has passed
    wait_seconds: int    # not registered in open mode: until the address may register again


async def enroll(db: Database, mac: str, digest: bytes, registration_open: bool, bucket: str,
                 limit: int) -> Enrollment:
    """Enroll `mac`, calling from address bucket `bucket` (registrations limited as in
    routers.register_from)."""
    params = {**bucket_params(bucket, limit), "mac": mac, "hash": digest,
              "open": registration_open}
    async with db.transaction() as cur:
        known, new, issued, closed, wait = await from_bucket(cur, _ENROLL, params,
                                                             lambda row: row[0])
    return Enrollment(known, new, issued, closed, max(1, int(wait or 1)))


async def set_key(db: Database, mac: str, digest: bytes, replace: bool) -> bool:
    """Issue (or, with `replace`, rotate) an operator key for a registered router; False
    when it has one already (issue) or has none to replace (rotate), or is not registered."""
    statement = (
        "UPDATE router_keys SET key_hash = %(hash)s, issued_at = now(), issued_by = 'operator' "
        "WHERE mac = %(mac)s" if replace else
        "INSERT INTO router_keys (mac, key_hash, issued_by) SELECT mac, %(hash)s, 'operator' "
        "FROM routers WHERE mac = %(mac)s ON CONFLICT (mac) DO NOTHING")
    async with db.transaction() as cur:
        await execute(cur, statement, {"hash": digest, "mac": mac})
        if cur.rowcount != 1:
            return False
        await execute(cur, KEY_CHANGED, {"mac": mac})
        return True


_RESET = """
WITH revoked AS (DELETE FROM router_keys WHERE mac = %(mac)s RETURNING mac),
opened AS (
    INSERT INTO enrollment_windows (mac, open_until)
    SELECT mac, now() + %(window)s FROM routers WHERE mac = %(mac)s
    ON CONFLICT (mac) DO UPDATE SET open_until = EXCLUDED.open_until RETURNING mac)
SELECT EXISTS (SELECT 1 FROM revoked), EXISTS (SELECT 1 FROM opened)"""


async def reset(db: Database, mac: str, window: timedelta, made_by: str) -> tuple[bool, bool]:
    """Revoke the router's key (if it has one) and let it enroll within `window` from now,
    and only then. Returns (a key was revoked, the router is registered)."""
    async with db.transaction() as cur:
        await execute(cur, _RESET, {"mac": mac, "window": window})
        revoked, registered = await cur.fetchone()
        if revoked:
            await execute(cur, KEY_CHANGED, {"mac": mac})
        if registered:
            await record(cur, made_by, "enrollment reset",
                         f"key {'revoked' if revoked else 'none'}; may enroll until "
                         f"{int(window.total_seconds() // 60)} minutes from then", mac)
    return revoked, registered
