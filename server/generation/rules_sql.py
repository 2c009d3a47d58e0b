"""Per-router rule payloads (`router_rules`) and activation records."""

from __future__ import annotations

import functools
from datetime import datetime

from server.db.channels import ROUTER_RULES, notify
from server.db.pool import Database, execute
from engine.generate import Holds
from server.polling.capacity import Declared


# Three statements sent together (one round trip, one implicit transaction), each planned
# by Citus onto the router's shard (data-modifying CTEs would be pulled through the
# coordinator: issue 45). The router's poll address is written only when it moved (the
# fleet job counts reporters by it: server/fleet/sql.py); most polls only read its row.
RECORD_ACTIVATION = "INSERT INTO activations (mac, address) VALUES (%(mac)s, %(address)s)"
MOVE_POLL_ADDRESS = ("UPDATE routers SET poll_address = %(address)s WHERE mac = %(mac)s "
                     "AND %(address)s::inet IS NOT NULL "
                     "AND poll_address IS DISTINCT FROM %(address)s::inet")
PAYLOAD_TIMES = ("SELECT ids_updated_at, firewall_updated_at FROM router_rules "
                 "WHERE mac = %(mac)s")
# What the router declares it holds (Router-Capacity), written only when it changed (most
# polls match no row); the router is then due for generation, within its payloads' new
# bounds, at most once every REGENERATION_GAP after its last generation (a router changing
# its header at each poll is generated no more often than that), and not before a failed
# generation's backoff has passed.
REGENERATION_GAP = "interval '5 minutes'"
DECLARED = "(declared_rules, declared_sets, declared_ja4)"
DECLARED_NOW = "(%(rules)s::bigint, %(sets)s::bigint, %(ja4)s::boolean)"
DECLARE_CAPACITY = (
    f"UPDATE generation_queue SET {DECLARED} = {DECLARED_NOW}, next_due_at = CASE WHEN "
    f"attempts > 0 THEN next_due_at ELSE "
    f"least(next_due_at, greatest(now(), generated_at + {REGENERATION_GAP})) END "
    f"WHERE mac = %(mac)s AND {DECLARED} IS DISTINCT FROM {DECLARED_NOW}")
ACTIVATE_AND_READ = f"{RECORD_ACTIVATION};\n{MOVE_POLL_ADDRESS};\n{PAYLOAD_TIMES}"
ACTIVATE_DECLARE_AND_READ = (f"{RECORD_ACTIVATION};\n{MOVE_POLL_ADDRESS};\n"
                             f"{DECLARE_CAPACITY};\n{PAYLOAD_TIMES}")


async def activate_and_read_timestamps(db: Database, mac: str, address: str | None,
                                       declared: Declared | None
                                       ) -> tuple[datetime | None, datetime | None]:
    """Record an activation (with the address the router called from, so that its firewall
    never blocks it, nor the fleet's list) and what it `declared` it holds (None: nothing
    to write, server/generation/declarations.py), and return (ids_updated_at,
    firewall_updated_at), one round trip."""
    async with db.cursor() as cur:
        if declared is None:
            await execute(cur, ACTIVATE_AND_READ, {"mac": mac, "address": address})
        else:
            await execute(cur, ACTIVATE_DECLARE_AND_READ, {
                "mac": mac, "address": address, **declared_params(declared)})
        row = await cur.fetchone()
    return (row[0], row[1]) if row else (None, None)


def declared_params(declared: Declared | Holds) -> dict:
    """The statements' parameters for what a router declared its own payloads must fit."""
    return {"rules": declared.rules, "sets": declared.sets, "ja4": declared.ja4}


# Plain SQL, built once per kind: this runs on every rules poll that the ETag cache cannot
# answer, and compiling a Core statement per call would cost more than the query.
READ_PAYLOAD = {kind: (
    f"SELECT {kind}_etag, CASE WHEN {kind}_etag = ANY(%(known)s::text[]) THEN NULL "
    f"ELSE {kind}_payload_gz END FROM router_rules "
    f"WHERE mac = %(mac)s AND {kind}_payload_gz IS NOT NULL") for kind in ("ids", "firewall")}


async def read_payload(db: Database, mac: str, kind: str, known_etags: frozenset[str]
                       ) -> tuple[str, bytes | None] | None:
    """Return (etag, gzip-compressed payload JSON) for the router's payload of `kind`, or None
    when there is none. The payload is None when the client already has that etag: the 304
    path reads no payload."""
    row = await db.fetchone(READ_PAYLOAD[kind], {"mac": mac, "known": list(known_etags)})
    if row is None:
        return None
    return row[0], None if row[1] is None else bytes(row[1])


@functools.lru_cache(maxsize=None)
def upsert_statement(kinds: tuple[str, ...]) -> str:
    """INSERT ... ON CONFLICT for the given payload kinds. Unchanged content (same etag) keeps
    its bytes and its updated_at, so neither the stored payload nor the router's view moves;
    when no kind changed, the row is not written at all. It returns a row only when the
    payload was inserted or changed: then the caller sends PAYLOAD_CHANGED."""
    columns, values, updates, changed = ["mac"], ["%(mac)s::macaddr"], [], []
    for kind in kinds:
        columns += [f"{kind}_payload_gz", f"{kind}_etag", f"{kind}_updated_at"]
        values += [f"%({kind}_gz)s", f"%({kind}_etag)s", "now()"]
        same = f"router_rules.{kind}_etag = EXCLUDED.{kind}_etag"
        updates += [
            f"{kind}_payload_gz = CASE WHEN {same} THEN router_rules.{kind}_payload_gz "
            f"ELSE EXCLUDED.{kind}_payload_gz END",
            f"{kind}_updated_at = CASE WHEN {same} THEN router_rules.{kind}_updated_at "
            f"ELSE EXCLUDED.{kind}_updated_at END",
            f"{kind}_etag = EXCLUDED.{kind}_etag"]
        changed.append(f"router_rules.{kind}_etag IS DISTINCT FROM EXCLUDED.{kind}_etag")
    return (f"INSERT INTO router_rules ({', '.join(columns)}) VALUES ({', '.join(values)}) "
            f"ON CONFLICT (mac) DO UPDATE SET {', '.join(updates)} "
            f"WHERE {' OR '.join(changed)} RETURNING 1")


# Sent in the transaction that changed a router's payload (delivered at its commit, not at
# all on rollback): every server process LISTENs on this channel and forgets the router's
# ETags (server/polling/etag_cache.py). A statement without a table, so that under Citus it
# runs on the coordinator, where the listeners are, not on the worker holding the shard.
PAYLOAD_CHANGED = notify(ROUTER_RULES, "%(mac)s::text")


async def store_payloads(db: Database, mac: str, payloads: dict[str, tuple[bytes, str]]
                         ) -> bool:
    """Store packed payloads (kind -> (gzip, etag)) for a router, notifying the servers when
    one changed; True when one did. (Generation stores its payloads the same way, within
    its lease: server/generation/task.py.)"""
    params = payload_params(mac, payloads)
    async with db.transaction() as cur:
        await execute(cur, upsert_statement(tuple(sorted(payloads))), params)
        if cur.rowcount != 1:
            return False
        await execute(cur, PAYLOAD_CHANGED, params)
        return True


def payload_params(mac: str, payloads: dict[str, tuple[bytes, str]]) -> dict[str, object]:
    params: dict[str, object] = {"mac": mac}
    for kind, (packed, etag) in payloads.items():
        params[f"{kind}_gz"], params[f"{kind}_etag"] = packed, etag
    return params


# A router's stored payloads with their ETags and times, as the console shows them.
STORED_PAYLOADS = """
SELECT ids_etag, ids_updated_at, firewall_etag, firewall_updated_at, ids_payload_gz,
       firewall_payload_gz
FROM router_rules WHERE mac = %(mac)s"""


async def stored_payloads(db: Database, mac: str) -> tuple | None:
    return await db.fetchone(STORED_PAYLOADS, {"mac": mac})
