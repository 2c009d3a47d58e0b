"""Per-router rule payloads (`router_rules`) and activation records."""

from __future__ import annotations

from datetime import datetime

import aiopg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from engine.payloads import serialize
from server.db.pool import Database, execute
from server.db.schema import router_rules

PAYLOAD_KINDS = ("ids", "firewall")


def _payload_columns(kind: str) -> tuple[sa.Column, sa.Column, sa.Column]:
    return (router_rules.c[f"{kind}_payload"], router_rules.c[f"{kind}_etag"],
            router_rules.c[f"{kind}_updated_at"])


async def activate_and_read_timestamps(db: Database, mac: str
                                       ) -> tuple[datetime | None, datetime | None]:
    """Record an activation and return (ids_updated_at, firewall_updated_at), one round trip."""
    statement = (
        "WITH activation AS (INSERT INTO activations (mac) VALUES (%(mac)s)) "
        "SELECT ids_updated_at, firewall_updated_at FROM router_rules WHERE mac = %(mac)s")
    async with db.cursor() as cur:
        await execute(cur, statement, {"mac": mac})
        row = await cur.fetchone()
    return (row[0], row[1]) if row else (None, None)


async def read_payload(db: Database, mac: str, kind: str, known_etags: frozenset[str]
                       ) -> tuple[str, str | None] | None:
    """Return (etag, payload JSON text) for the router's payload of `kind`, or None when there
    is none. The text is None when the etag is one the client already has (no payload read)."""
    payload, etag, _ = _payload_columns(kind)
    unchanged = etag.in_(list(known_etags)) if known_etags else sa.false()
    query = (sa.select(etag, sa.case((unchanged, sa.null()),
                                     else_=sa.cast(payload, sa.Text)))
             .where(router_rules.c.mac == mac, payload.is_not(None)))
    row = await db.fetchone(query)
    return (row[0], row[1]) if row else None


async def store_payloads(cur: aiopg.Cursor, mac: str,
                         payloads: dict[str, tuple[bytes, str]]) -> None:
    """Upsert serialised payloads (kind -> (canonical JSON, etag); see engine.payloads) with
    the caller's cursor, so it can share a transaction. A payload's `updated_at` moves only
    when its etag (its content) changed."""
    excluded = insert(router_rules).excluded
    values: dict[str, object] = {"mac": mac}
    changes: dict[str, object] = {}
    for kind, (body, new_etag) in payloads.items():
        payload, etag, updated_at = _payload_columns(kind)
        values.update({payload.name: body.decode(), etag.name: new_etag,
                       updated_at.name: sa.func.now()})
        changes.update({
            payload.name: excluded[payload.name],
            etag.name: excluded[etag.name],
            updated_at.name: sa.case((etag == new_etag, updated_at), else_=sa.func.now()),
        })
    query = (insert(router_rules).values(**values)
             .on_conflict_do_update(index_elements=["mac"], set_=changes))
    await execute(cur, query)


async def store_payload_objects(db: Database, mac: str, payloads: dict[str, object]) -> None:
    """Serialise and store payloads given as JSON-able objects (operators' tools, tests)."""
    async with db.cursor() as cur:
        await store_payloads(cur, mac, {kind: serialize(body) for kind, body in payloads.items()})
