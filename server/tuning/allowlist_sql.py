"""The firewall allowlist (table `firewall_allowlist`): networks never blocked, for the whole
fleet or for one router. A change makes the routers it concerns due for generation now, so
their firewall payloads lose the address at the queue's pace instead of at their next turn;
and every server process is told, so the fleet's shared list loses it at once
(server/fleet/document.py)."""

from __future__ import annotations

from server.db.channels import FLEET_CHANGED
from server.db.pool import Database, execute
from server.routers.sql import make_due
from server.db.tuning_changes import record


async def add(db: Database, network: str, mac: str | None, note: str | None, made_by: str
              ) -> tuple[int | None, int]:
    """(id of the new entry, or None when it existed; routers made due)."""
    async with db.transaction() as cur:
        return await add_in(cur, network, mac, note, made_by)


async def add_in(cur, network: str, mac: str | None, note: str | None, made_by: str
                 ) -> tuple[int | None, int]:
    """`add` in the caller's transaction."""
    await execute(cur, "INSERT INTO firewall_allowlist (network, mac, note) "
                       "SELECT %(network)s, %(mac)s, %(note)s "
                       "WHERE %(mac)s::macaddr IS NULL OR EXISTS "
                       "(SELECT 1 FROM routers WHERE mac = %(mac)s) "
                       "ON CONFLICT DO NOTHING RETURNING id",
                  {"network": network, "mac": mac, "note": note})
    row = await cur.fetchone()
    if row is None:
        return None, 0
    await record(cur, made_by, "allowlist entry added",
                 f"{row[0]}: {network}" + (f" ({note})" if note else ""), mac)
    await execute(cur, FLEET_CHANGED)
    return row[0], await make_due(cur, mac)


async def remove(db: Database, entry_id: int, made_by: str) -> bool:
    async with db.transaction() as cur:
        return await remove_in(cur, entry_id, made_by)


async def remove_in(cur, entry_id: int, made_by: str) -> bool:
    """`remove` in the caller's transaction."""
    await execute(cur, "DELETE FROM firewall_allowlist WHERE id = %s "
                       "RETURNING network::text, mac::text", (entry_id,))
    row = await cur.fetchone()
    if row is None:
        return False
    await record(cur, made_by, "allowlist entry removed", f"{entry_id}: {row[0]}", row[1])
    await execute(cur, FLEET_CHANGED)
    return True


async def entries(db: Database) -> list[tuple]:
    """(id, network, mac or None, note, created_at), fleet-wide entries first."""
    return await db.fetchall("SELECT id, network::text, mac::text, note, created_at "
                             "FROM firewall_allowlist ORDER BY mac NULLS FIRST, network, id")


async def fleet_allowlist(db: Database) -> list[str]:
    """The fleet-wide entries' networks."""
    return [row[0] for row in await db.fetchall(
        "SELECT network::text FROM firewall_allowlist WHERE mac IS NULL")]


async def own_allowlists(db: Database) -> dict[str, list[str]]:
    """Each router's own allowlist networks, for the routers that have any."""
    rows = await db.fetchall("SELECT mac::text, array_agg(network::text ORDER BY network) "
                             "FROM firewall_allowlist WHERE mac IS NOT NULL GROUP BY mac")
    return {mac: networks for mac, networks in rows}


async def router_allowlist(db: Database, mac: str) -> list[str]:
    """The allowlist's networks that hold for this router: the fleet's and its own."""
    return [row[0] for row in await db.fetchall(
        "SELECT network::text FROM firewall_allowlist WHERE mac IS NULL OR mac = %s", (mac,))]


# A router removed (server/removal.py): its own entries (the foreign key's cascade, which
# Citus mode drops: server/db/citus_nodes.py).
FORGET_ROUTER = "DELETE FROM firewall_allowlist WHERE mac = %(mac)s"
