"""Removing a router: every capability forgets it in one transaction, the router's row last.

Its place in the generation queue, its allowlist entries and rule overrides, its hunt
postings (its number in the packed index forgotten, so that no hunt names it:
server/hunt/sql.py) its threat sightings and enforcement reports go, its owner's marks end (their record kept);
its telemetry stays until retention removes it. The one module that knows every capability a router lives in.
"""

from __future__ import annotations

from server.db.pool import Database, execute
from server.enforcement import sql as enforcement_sql
from server.feedback import sql as feedback_sql
from server.generation import sql as generation_sql
from server.hunt import sql as hunt_sql
from server.intel import sql as intel_sql
from server.routers import sql as router_sql
from server.tuning import allowlist_sql, override_sql

# The owners' marks' lock on the router first: a mark made meanwhile waits, then finds the
# router gone (it would otherwise wait on the queue row this deletes, and this on it).
FORGOTTEN_FIRST = (feedback_sql.LOCK_ROUTER, generation_sql.FORGET_ROUTER, allowlist_sql.FORGET_ROUTER,
                   override_sql.FORGET_ROUTER, intel_sql.FORGET_ROUTER,
                   feedback_sql.FORGET_ROUTER, enforcement_sql.FORGET_ROUTER)


async def unsubscribe(db: Database, mac: str) -> bool:
    """Remove the router; False when it was not registered (nothing changes)."""
    async with db.transaction() as cur:
        for statement in FORGOTTEN_FIRST:
            await execute(cur, statement, {"mac": mac})
        await execute(cur, hunt_sql.AFTER_PACKING)
        await execute(cur, hunt_sql.FORGET_HUNT_ROUTER, {"mac": mac})
        return await router_sql.remove(cur, mac)
