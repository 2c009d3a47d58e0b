"""Bookkeeping of scheduled jobs in the database: tick claims, exclusive locks, run records."""

from __future__ import annotations

import contextlib
import zlib
from datetime import datetime
from typing import AsyncIterator

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from server.db.pool import Database, execute
from server.db.schema import job_runs, job_ticks


def lock_key(job: str) -> int:
    """A stable advisory-lock key per job name (crc32 fits PostgreSQL's bigint)."""
    return 7_302_000_000 + zlib.crc32(job.encode())


async def claim_tick(db: Database, job: str, tick: datetime, claimed_by: str) -> bool:
    """True for exactly one claimant per (job, tick), whichever asks first, and for it again
    when it asks again: a claim whose answer was lost (the connection failed after the
    commit) is still its own, so the tick is not left unrun."""
    row = insert(job_ticks).values(job=job, tick=tick, claimed_by=claimed_by)
    query = row.on_conflict_do_update(
        index_elements=["job", "tick"], set_={"claimed_by": row.excluded.claimed_by},
        where=job_ticks.c.claimed_by == row.excluded.claimed_by)
    return await db.execute(query) == 1


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
    The lock lives in a session, so a crashed holder releases it."""
    async with db.cursor() as cur:
        await execute(cur, "SELECT pg_try_advisory_lock(%s)", (lock_key(job),))
        acquired = (await cur.fetchone())[0]
        try:
            yield acquired
        finally:
            if acquired:
                await execute(cur, "SELECT pg_advisory_unlock(%s)", (lock_key(job),))


async def start_run(db: Database, job: str) -> int:
    row = await db.fetchone(sa.insert(job_runs).values(job=job).returning(job_runs.c.id))
    return row[0]


async def finish_run(db: Database, run_id: int, status: str, detail: dict | None = None,
                     error: str | None = None) -> None:
    await db.execute(sa.update(job_runs).where(job_runs.c.id == run_id).values(
        status=status, finished_at=sa.func.now(), error=error,
        detail=sa.cast(orjson.dumps(detail or {}, default=str).decode(), job_runs.c.detail.type)))
