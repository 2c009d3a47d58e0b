"""Bookkeeping of scheduled jobs in the database: their ticks as leased work
(server/db/leases.py), exclusive locks, run records."""

from __future__ import annotations

import contextlib
import zlib
from datetime import datetime, timedelta
from typing import AsyncIterator

import orjson

from server.db import leases
from server.db.leases import Leased, claim_one_statement, claim_statement, fail_statement
from server.db.leases import finish_statement
from server.db.pool import Database, execute

TICKS = Leased("job_ticks", "id", "bigint", "next_due_at")

# A new tick ends the job's older ticks still waiting for a retry (nobody's lease live):
# the new one does their work.
_ADD_TICK = """
WITH superseded AS (
    UPDATE job_ticks SET next_due_at = NULL, last_error = 'superseded by a later tick'
    WHERE job = %(job)s AND tick < %(tick)s AND next_due_at IS NOT NULL
      AND (claimed_until IS NULL OR claimed_until < now()))
INSERT INTO job_ticks (job, tick, next_due_at) VALUES (%(job)s, %(tick)s, now())
ON CONFLICT (job, tick) DO NOTHING"""
_CLAIM = claim_statement(TICKS, where="AND job = %(job)s", order="tick DESC",
                         returning="w.id")
_CLAIM_ONE = claim_one_statement(TICKS)
_FINISH = finish_statement(TICKS, "next_due_at = NULL")
_FAIL = fail_statement(TICKS) + " RETURNING next_due_at IS NOT NULL"


def lock_key(job: str) -> int:
    """A stable advisory-lock key per job name (crc32 fits PostgreSQL's bigint)."""
    return 7_302_000_000 + zlib.crc32(job.encode())


async def add_tick(db: Database, job: str, tick: datetime) -> None:
    """The job's tick, due now (once: every process adds it as the tick comes)."""
    await db.execute(_ADD_TICK, {"job": job, "tick": tick})


async def claim_tick(db: Database, job: str, owner: str, lease: timedelta) -> int | None:
    """The id of the job's newest due tick, leased to `owner`, or None. The owner's own
    standing claim is taken again: a claim whose answer was lost is not left unrun."""
    rows = await leases.claim(db, _CLAIM, owner, lease, 1, own=True, job=job)
    return rows[0][0] if rows else None


async def claim_again(db: Database, tick_id: int, owner: str, lease: timedelta) -> bool:
    """The tick once more for its retry, unless another process took it meanwhile."""
    return await leases.claim_one(db, _CLAIM_ONE, owner, tick_id, lease)


async def finish_tick(db: Database, tick_id: int, owner: str) -> None:
    await db.execute(_FINISH, {"key": tick_id, "owner": owner})


async def fail_tick(db: Database, tick_id: int, owner: str, error: str, retry_delay: timedelta,
                    attempts: int) -> bool:
    """A failed run of the tick; True when it is to be tried again (after `retry_delay`),
    False when its `attempts` are spent."""
    row = await db.fetchone(_FAIL, {"key": tick_id, "owner": owner, "error": error,
                                    **leases.backoff(retry_delay, retry_delay, attempts)})
    return bool(row and row[0])


async def last_tick(db: Database, job: str) -> datetime | None:
    row = await db.fetchone("SELECT max(tick) FROM job_ticks WHERE job = %s", (job,))
    return row[0]


async def installed_at(db: Database) -> datetime:
    """When this database was first migrated: the service existed from then on."""
    row = await db.fetchone("SELECT min(applied_at_utc) AT TIME ZONE 'UTC' "
                            "FROM _yoyo_migration")
    return row[0]


@contextlib.asynccontextmanager
async def exclusive(db: Database, job: str) -> AsyncIterator[bool]:
    """Hold the job's advisory lock for the block; yields False when another process has it.
    The lock lives in a session (outside the pool), so a crashed holder releases it."""
    async with db.session() as cur:
        await execute(cur, "SELECT pg_try_advisory_lock(%s)", (lock_key(job),))
        acquired = (await cur.fetchone())[0]
        try:
            yield acquired
        finally:
            if acquired:
                await execute(cur, "SELECT pg_advisory_unlock(%s)", (lock_key(job),))


async def start_run(db: Database, job: str) -> int:
    row = await db.fetchone("INSERT INTO job_runs (job) VALUES (%s) RETURNING id", (job,))
    return row[0]


async def finish_run(db: Database, run_id: int, status: str, detail: dict | None = None,
                     error: str | None = None) -> None:
    await db.execute("UPDATE job_runs SET status = %s, finished_at = now(), error = %s, "
                     "detail = %s WHERE id = %s",
                     (status, error, orjson.dumps(detail or {}, default=str).decode(), run_id))
