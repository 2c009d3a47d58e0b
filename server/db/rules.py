"""Per-router rule payloads (`router_rules`) and activation records."""

from __future__ import annotations

import functools
from datetime import datetime

from server.db.pool import Database, execute


async def activate_and_read_timestamps(db: Database, mac: str, address: str | None
                                       ) -> tuple[datetime | None, datetime | None]:
    """Record an activation (with the address the router called from, so that its firewall
    never blocks it) and return (ids_updated_at, firewall_updated_at), one round trip."""
    statement = (
        "WITH activation AS (INSERT INTO activations (mac, address) "
        "VALUES (%(mac)s, %(address)s)) "
        "SELECT ids_updated_at, firewall_updated_at FROM router_rules WHERE mac = %(mac)s")
    async with db.cursor() as cur:
        await execute(cur, statement, {"mac": mac, "address": address})
        row = await cur.fetchone()
    return (row[0], row[1]) if row else (None, None)


# Plain SQL, built once per kind: this runs on every rules poll that the ETag cache cannot
# answer, and compiling a Core statement per call would cost more than the query.
_READ_PAYLOAD = {kind: (
    f"SELECT {kind}_etag, CASE WHEN {kind}_etag = ANY(%(known)s::text[]) THEN NULL "
    f"ELSE {kind}_payload_gz END FROM router_rules "
    f"WHERE mac = %(mac)s AND {kind}_payload_gz IS NOT NULL") for kind in ("ids", "firewall")}


async def read_payload(db: Database, mac: str, kind: str, known_etags: frozenset[str]
                       ) -> tuple[str, bytes | None] | None:
    """Return (etag, gzip-compressed payload JSON) for the router's payload of `kind`, or None
    when there is none. The payload is None when the client already has that etag: the 304
    path reads no payload."""
    row = await db.fetchone(_READ_PAYLOAD[kind], {"mac": mac, "known": list(known_etags)})
    if row is None:
        return None
    return row[0], None if row[1] is None else bytes(row[1])


@functools.lru_cache(maxsize=None)
def upsert_statement(kinds: tuple[str, ...], source: str = "") -> str:
    """INSERT ... ON CONFLICT for the given payload kinds, from VALUES or, with `source`, from
    `SELECT ... FROM <source>` (a CTE the caller defines). Unchanged content (same etag) keeps
    its bytes and its updated_at, so neither the stored payload nor the router's view moves."""
    columns, values, updates = ["mac"], ["%(mac)s::macaddr"], []
    for kind in kinds:
        columns += [f"{kind}_payload_gz", f"{kind}_etag", f"{kind}_updated_at"]
        values += [f"%({kind}_gz)s", f"%({kind}_etag)s", "now()"]
        same = f"router_rules.{kind}_etag = EXCLUDED.{kind}_etag"
        updates += [
            f"{kind}_payload_gz = CASE WHEN {same} THEN router_rules.{kind}_payload_gz "
            f"ELSE EXCLUDED.{kind}_payload_gz END",
            f"{kind}_updated_at = CASE WHEN {same} THEN router_rules.{kind}_updated_at "
            f"ELSE now() END",
            f"{kind}_etag = EXCLUDED.{kind}_etag"]
    rows = f"SELECT {', '.join(values)} FROM {source}" if source else \
        f"VALUES ({', '.join(values)})"
    return (f"INSERT INTO router_rules ({', '.join(columns)}) {rows} "
            f"ON CONFLICT (mac) DO UPDATE SET {', '.join(updates)}")


def payload_params(mac: str, payloads: dict[str, tuple[bytes, str]]) -> dict[str, object]:
    params: dict[str, object] = {"mac": mac}
    for kind, (packed, etag) in payloads.items():
        params[f"{kind}_gz"], params[f"{kind}_etag"] = packed, etag
    return params

