"""The fleet's lists as operators read them, from what the fleet job stored
(server/fleet/sql.py), their times written as the lists carry them (engine/fleet.py): the
attackers and the outbreaks (the console's fleet page, `router-backend fleet`), the entries
one router gets (its console page, `rulegen --explain`)."""

from __future__ import annotations

from engine.firewall import Exemptions
from engine.fleet import times_written
from server.fleet import sql as fleet_db
from server.tuning import allowlist_sql
from server.db.pool import Database


async def attackers(db: Database) -> list[dict]:
    """The fleet's attackers in the order a smaller list keeps them (matched at the most
    networks on the routers' firewalls first, then the most widely reported), with the
    operators' evidence."""
    return [times_written(entry) for entry in await fleet_db.attackers(db)]


async def outbreaks(db: Database) -> list[dict]:
    return [times_written(entry) for entry in await fleet_db.outbreaks(db)]


async def for_router(db: Database, mac: str) -> list[dict]:
    """The fleet's attackers this router gets (the allowlist's, fleet-wide and its own, out),
    with the operators' evidence."""
    exempt = Exemptions.of(await allowlist_sql.router_allowlist(db, mac), []).exempt
    return [entry for entry in await attackers(db) if not exempt(entry["address"])]
