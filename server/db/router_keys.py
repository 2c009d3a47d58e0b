"""Router keys (table `router_keys`): only hashes, one per registered router."""

from __future__ import annotations

from dataclasses import dataclass

from server.db.pool import Database


async def key_hash_of(db: Database, mac: str) -> bytes | None:
    row = await db.fetchone("SELECT key_hash FROM router_keys WHERE mac = %s", (mac,))
    return bytes(row[0]) if row else None


# Enrollment in one statement: register the router when registration is open (and queue it
# for generation), then give it a key unless it has one. The router row a CTE inserts is not
# in the statement's snapshot of `routers`, hence `known`.
_ENROLL = """
WITH registered AS (
    INSERT INTO routers (mac, registered_by) SELECT %(mac)s, 'auto' WHERE %(open)s
    ON CONFLICT (mac) DO NOTHING RETURNING mac),
queued AS (
    INSERT INTO generation_queue (mac) SELECT mac FROM registered ON CONFLICT DO NOTHING),
known AS (
    SELECT mac FROM registered UNION ALL SELECT mac FROM routers WHERE mac = %(mac)s),
issued AS (
    INSERT INTO router_keys (mac, key_hash, issued_by)
    SELECT mac, %(hash)s, 'enrollment' FROM known ON CONFLICT (mac) DO NOTHING RETURNING mac)
SELECT EXISTS (SELECT 1 FROM known), EXISTS (SELECT 1 FROM registered),
       EXISTS (SELECT 1 FROM issued)"""


@dataclass(frozen=True)
class Enrollment:
    registered: bool   # the router is registered (now or before)
    new_router: bool   # registered by this enrollment
    issued: bool       # a key was issued (False: it has one already)


async def enroll(db: Database, mac: str, digest: bytes, registration_open: bool) -> Enrollment:
    row = await db.fetchone(_ENROLL, {"mac": mac, "hash": digest, "open": registration_open})
    return Enrollment(*row)


async def set_key(db: Database, mac: str, digest: bytes, replace: bool) -> bool:
    """Issue (or, with `replace`, rotate) an operator key for a registered router; False
    when it has one already (issue) or has none to replace (rotate), or is not registered."""
    if replace:
        return await db.execute("UPDATE router_keys SET key_hash = %s, issued_at = now(), "
                                "issued_by = 'operator' WHERE mac = %s", (digest, mac)) == 1
    return await db.execute(
        "INSERT INTO router_keys (mac, key_hash, issued_by) SELECT mac, %s, 'operator' "
        "FROM routers WHERE mac = %s ON CONFLICT (mac) DO NOTHING", (digest, mac)) == 1


async def reset(db: Database, mac: str) -> bool:
    """Revoke the router's key so that it can enroll again; False when it had none."""
    return await db.execute("DELETE FROM router_keys WHERE mac = %s", (mac,)) == 1
