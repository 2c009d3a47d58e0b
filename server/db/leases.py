"""Leased work: the one mechanism by which server processes share background work held in a
table (routers to generate, notifications to retry, scheduled jobs' ticks).

A row of such a table is a piece of work. It is due from `due` on (NULL: nothing more to do:
done, or given up). A process claims due rows under a lease (`claimed_by`, `claimed_until`)
with FOR UPDATE SKIP LOCKED, so each is taken by one process; it renews the lease while it
works and ends it with the outcome: `finish` (its own columns set), `fail` (retried after a
doubling delay, at most a cap, given up after a number of attempts, `last_error` kept) or
`release` (due again as it was). A lease that runs out (its process died) makes the row due
again for any process. Every statement that ends or renews a lease names the owner, and only
a live lease is renewed, so a statement that reaches the database late (its sender gave up on
it) never takes back work another process has.

Kept as our own (procrastinate was the library weighed): its jobs are one-off messages, while
two of our three kinds of work are rows that live on (a router due again every interval, a
notification whose attempts are its history).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from server.db.pool import Database, execute


@dataclass(frozen=True)
class Leased:
    """A table of leased work: its name, the column naming a row, that column's type and the
    column of when a row is due (the other columns are the same in every such table)."""
    table: str
    key: str
    key_type: str
    due: str

    @property
    def free(self) -> str:
        """Due, and nobody's lease on it is live."""
        return (f"{self.due} <= now() AND (claimed_until IS NULL OR claimed_until < now())")


def claim_statement(work: Leased, where: str = "", order: str = "",
                    returning: str = "") -> str:
    """Claim up to %(limit)s free rows for %(owner)s, for %(lease)s. `own`: see `claim`."""
    return f"""
UPDATE {work.table} w SET claimed_by = %(owner)s, claimed_until = now() + %(lease)s
WHERE w.{work.key} IN (
    SELECT {work.key} FROM {work.table}
    WHERE ({work.free} OR (%(own)s AND claimed_by = %(owner)s AND {work.due} IS NOT NULL))
    {where} ORDER BY {order or work.due} LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING {returning or f"w.{work.key}::text"}"""


async def claim(db: Database, statement: str, owner: str, lease: timedelta, limit: int,
                own: bool = False, **params) -> list[tuple]:
    """Rows claimed by `statement` (from `claim_statement`). `own`: the owner's standing
    claims are taken again too: a caller with none of its work under way thereby takes back
    a claim whose answer it lost (the connection failed after the commit) instead of leaving
    the row held for the whole lease."""
    async with db.cursor() as cur:
        await execute(cur, statement, {"owner": owner, "lease": lease, "limit": limit,
                                       "own": own, **params})
        return await cur.fetchall()


def claim_one_statement(work: Leased) -> str:
    """Take the lease on row %(key)s when it is free or already %(owner)s's (its lease then
    renewed), whatever its due time; nothing when another owner's lease is live or the row
    has nothing more to do (due NULL)."""
    return f"""
UPDATE {work.table} SET claimed_by = %(owner)s, claimed_until = now() + %(lease)s
WHERE {work.key} = %(key)s AND {work.due} IS NOT NULL
  AND (claimed_until IS NULL OR claimed_until < now() OR claimed_by = %(owner)s)
RETURNING {work.key}"""


async def claim_one(db: Database, statement: str, owner: str, key, lease: timedelta) -> bool:
    """Whether `statement` (from `claim_one_statement`) took the lease on row `key`."""
    return await db.fetchone(statement, {"owner": owner, "key": key,
                                         "lease": lease}) is not None


def renew_statement(work: Leased) -> str:
    """Extend %(owner)s's live leases on %(keys)s to at least %(lease)s from now: never
    shortens one, never revives one that ran out."""
    return f"""
UPDATE {work.table} SET claimed_until = greatest(claimed_until, now() + %(lease)s)
WHERE claimed_by = %(owner)s AND claimed_until >= now()
  AND {work.key} = ANY(%(keys)s::{work.key_type}[])
RETURNING {work.key}"""


async def renew(db: Database, work: Leased, owner: str, keys: list, lease: timedelta) -> int:
    """Renew `owner`'s leases on `keys` (the work it is doing); how many it still held."""
    if not keys:
        return 0
    return await db.execute(renew_statement(work),
                            {"owner": owner, "keys": keys, "lease": lease})


async def release(db: Database, work: Leased, owner: str, key) -> None:
    """Hand one claimed row back, due as it was (a process stopping before it began)."""
    await db.execute(f"UPDATE {work.table} SET claimed_by = NULL, claimed_until = NULL "
                     f"WHERE {work.key} = %(key)s AND claimed_by = %(owner)s",
                     {"key": key, "owner": owner})


def finish_statement(work: Leased, also_set: str, owned: bool = True) -> str:
    """End the lease on row %(key)s with its outcome (`also_set`: the table's own columns,
    the due time included). `owned`: only while %(owner)s's lease is live."""
    return (f"UPDATE {work.table} SET claimed_by = NULL, claimed_until = NULL, {also_set} "
            f"WHERE {work.key} = %(key)s" + (" AND claimed_by = %(owner)s AND claimed_until "
                                             ">= now()" if owned else ""))


def fail_statement(work: Leased, also_set: str = "", owned: bool = True) -> str:
    """A failed attempt on row %(key)s: due again after %(delay)s × 2^(attempts before it),
    at most %(max_delay)s; given up (due NULL) at %(give_up)s attempts (NULL: never).
    `owned`: only while %(owner)s holds it (a lease run out included: failing is how the
    owner hands it back)."""
    return (f"UPDATE {work.table} SET claimed_by = NULL, claimed_until = NULL, "
            f"attempts = attempts + 1, last_error = left(%(error)s, 500), "
            f"{work.due} = CASE WHEN attempts + 1 >= %(give_up)s THEN NULL "
            f"ELSE now() + least(%(max_delay)s, %(delay)s * power(2, attempts)) END"
            f"{', ' + also_set if also_set else ''} WHERE {work.key} = %(key)s"
            + (" AND claimed_by = %(owner)s" if owned else ""))


def backoff(delay: timedelta, max_delay: timedelta, give_up: int | None = None) -> dict:
    """The parameters of `fail_statement`."""
    return {"delay": delay, "max_delay": max_delay, "give_up": give_up}
