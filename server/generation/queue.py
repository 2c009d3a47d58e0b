"""The generation queue's SQL as the event loop runs it (aiopg): claim due routers, renew,
release and reschedule claims, read the queue's state.

Claims are leases: `claimed_by`/`claimed_until` set in the same statement that picks due
routers with FOR UPDATE SKIP LOCKED. The lease's owner is a process name
(server.process.background.process_name(), or `rulegen@...` for the command).
"""

from __future__ import annotations

from datetime import timedelta

from server.db.pool import Database, execute

_CLAIM_DUE = """
UPDATE generation_queue q SET claimed_by = %(owner)s, claimed_until = now() + %(lease)s
WHERE q.mac IN (
    SELECT mac FROM generation_queue
    WHERE next_due_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
    ORDER BY (generated_at IS NOT NULL), next_due_at
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING q.mac::text"""

# Take one router's lease, or renew it when it is already the owner's.
CLAIM_ONE = """
UPDATE generation_queue SET claimed_by = %(owner)s, claimed_until = now() + %(lease)s
WHERE mac = %(mac)s
  AND (claimed_until IS NULL OR claimed_until < now() OR claimed_by = %(owner)s)
RETURNING mac"""

# Renew the owner's live lease on one router, never take one: the worker's first statement.
# A statement can reach the server after its sender gave up on it (a network that held it,
# then delivered it); had it been allowed to take an unclaimed router, a worker's statement
# held through a network cut would claim back, after the router's failure was recorded, the
# router its worker had already given up on, for one more lease.
RENEW_ONE = """
UPDATE generation_queue SET claimed_until = now() + %(lease)s
WHERE mac = %(mac)s AND claimed_by = %(owner)s AND claimed_until >= now()
RETURNING mac"""

# Keep the claims of generations running in a living process alive; never shortens a lease,
# never revives an expired one.
_RENEW = """
UPDATE generation_queue SET claimed_until = greatest(claimed_until, now() + %(lease)s)
WHERE claimed_by = %(owner)s AND claimed_until >= now() AND mac = ANY(%(macs)s::macaddr[])"""

_RELEASE = """
UPDATE generation_queue SET claimed_by = NULL, claimed_until = NULL
WHERE mac = %(mac)s AND claimed_by = %(owner)s"""

_FAIL = """
UPDATE generation_queue SET claimed_by = NULL, claimed_until = NULL,
    next_due_at = now() + least(%(interval)s, interval '1 minute' * power(2, attempts)),
    attempts = attempts + 1, last_error = %(error)s
WHERE mac = %(mac)s AND claimed_by = %(owner)s"""

_STATE = """
SELECT count(*) FILTER (WHERE claimed_until >= now()),
       count(*) FILTER (WHERE next_due_at <= now() AND (claimed_until IS NULL
                                                       OR claimed_until < now())),
       count(*) FILTER (WHERE next_due_at <= now() - interval '1 hour'),
       count(*) FILTER (WHERE attempts > 0),
       count(*)
FROM generation_queue"""


async def claim_due(db: Database, owner: str, limit: int, lease: timedelta) -> list[str]:
    """Up to `limit` due routers, never-generated first, then by due time."""
    async with db.cursor() as cur:
        await execute(cur, _CLAIM_DUE, {"owner": owner, "lease": lease, "limit": limit})
        return [row[0] for row in await cur.fetchall()]


async def claim_router(db: Database, owner: str, mac: str, lease: timedelta) -> bool:
    """Take (or renew) the lease on one router; False when another owner holds it."""
    async with db.cursor() as cur:
        await execute(cur, CLAIM_ONE, {"owner": owner, "mac": mac, "lease": lease})
        return await cur.fetchone() is not None


async def renew_claims(db: Database, owner: str, macs: list[str], lease: timedelta) -> int:
    """Extend `owner`'s claims on `macs` (the routers it is generating); how many it held."""
    if not macs:
        return 0
    return await db.execute(_RENEW, {"owner": owner, "macs": macs, "lease": lease})


async def release(db: Database, owner: str, mac: str) -> None:
    await db.execute(_RELEASE, {"owner": owner, "mac": mac})


async def fail(db: Database, owner: str, mac: str, interval: timedelta, error: str) -> None:
    """Retry later with backoff (1, 2, 4 ... minutes, at most the normal interval)."""
    await db.execute(_FAIL, {"owner": owner, "mac": mac, "interval": interval,
                             "error": error[:500]})


async def queue_state(db: Database) -> dict[str, int]:
    """Routers being generated now, due and waiting, due for over an hour (generation falls
    behind), whose last generation failed, and in the queue at all."""
    claimed, due, overdue, failing, total = await db.fetchone(_STATE)
    return {"claimed": claimed, "due": due, "overdue": overdue, "failing": failing,
            "total": total}
