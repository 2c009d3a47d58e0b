"""Catalog changes that need a partitioned table alone (a plain DETACH, the swap of a
rewritten partition), taken without holding the table's users up for long.

Such a change waits for every statement in progress on the table, and each statement that
comes after it queues behind it: an upload stalled mid-body would hold every other upload
for as long as it stalls. So each try waits at most LOCK_TIMEOUT, and after TRIES the
change is left for its job's next run."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import psycopg

from server.db.pool import Database, DatabaseUnavailable, execute

LOCK_TIMEOUT = "1s"
TRIES = 5
PAUSE_SECONDS = 2.0   # after the first failed try; longer after each


async def with_brief_locks(db: Database,
                           change: Callable[[psycopg.AsyncCursor], Awaitable[None]]) -> bool:
    """Run `change` (its statements on the cursor given) in one transaction whose every lock
    waits at most LOCK_TIMEOUT; False when it could not take them in TRIES tries (nothing
    changed)."""
    for attempt in range(TRIES):
        try:
            async with db.transaction() as cur:
                await execute(cur, f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                await change(cur)
            return True
        except DatabaseUnavailable as error:  # the pool's name for a lock timeout too
            if not isinstance(error.__cause__, psycopg.errors.LockNotAvailable):
                raise
            await asyncio.sleep(PAUSE_SECONDS * (attempt + 1))
    return False
