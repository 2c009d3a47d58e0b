"""The SQL of the owners' marks (migration 0043, table `false_positives`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.addresses import ALLOCATION_PREFIX, PER_ALLOCATION
from server.db.pool import Database, execute
from server.routers.sql import counted as counted_router

_COLUMNS = "id, kind, value, feed, note, marked_at, unmarked_at"
# A removed router's marks end with it (their effects, its allowlist entries and overrides,
# are forgotten beside them: server/removal.py); the record of them stays.
FORGET_ROUTER = """UPDATE false_positives SET unmarked_at = now(), unmarked_by = 'router removed'
WHERE mac = %(mac)s AND unmarked_at IS NULL"""
_LIVE = f"""SELECT {_COLUMNS} FROM false_positives
WHERE mac = %(mac)s AND kind = %(kind)s AND value = %(value)s AND unmarked_at IS NULL"""
# Marks of one router are made one at a time (its lock), so that its day's count holds.
# (A router's removal takes it too, first: server/removal.py.)
LOCK_ROUTER = "SELECT pg_advisory_xact_lock(hashtext('false-positives:' || %(mac)s))"
# A value's hold is judged one transaction at a time, each counting what the others did.
_LOCK_VALUE = "SELECT pg_advisory_xact_lock(hashtext('false-positive-hold:' || %(value)s))"
_MADE_TODAY = """SELECT count(*) FROM false_positives
WHERE mac = %(mac)s AND user_id = %(user)s AND marked_at > now() - interval '1 day'"""
_ADD = f"""INSERT INTO false_positives (mac, user_id, kind, value, feed, network, note, effect)
VALUES (%(mac)s, %(user)s, %(kind)s, %(value)s, %(feed)s, %(network)s, %(note)s, %(effect)s)
ON CONFLICT DO NOTHING RETURNING {_COLUMNS}"""
_UNMARK = """UPDATE false_positives SET unmarked_at = now(), unmarked_by = %(user)s
WHERE id = %(id)s AND mac = %(mac)s AND user_id = %(user)s AND unmarked_at IS NULL
RETURNING kind, value, effect"""
_OF_ROUTER = f"""SELECT {_COLUMNS} FROM false_positives
WHERE mac = %(mac)s AND (%(user)s::text IS NULL OR user_id = %(user)s)
ORDER BY marked_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s"""
_COUNT_OF_ROUTER = """SELECT count(*) FROM false_positives
WHERE mac = %(mac)s AND (%(user)s::text IS NULL OR user_id = %(user)s)"""
# Live marks of a router by others than its owner now: ended when the owner changes.
_OTHERS_LIVE = """UPDATE false_positives SET unmarked_at = now(), unmarked_by = 'owner changed'
WHERE mac = %(mac)s AND unmarked_at IS NULL AND user_id IS DISTINCT FROM %(user)s
RETURNING kind, value, effect"""
# Another live mark of the router naming the same address takes over an allowlist entry
# the mark undone made (the address's mark and the sighting's share one entry).
_HAND_OVER = """UPDATE false_positives SET effect = %(effect)s
WHERE id = (SELECT id FROM false_positives WHERE mac = %(mac)s AND unmarked_at IS NULL
            AND effect IS NULL AND kind IN ('address', 'sighting')
            AND value IN (%(address)s, 'ip:' || %(address)s) LIMIT 1)
RETURNING id"""
# The threat feeds' values that live marks name, and those owners' marks hold.
_MARKED_VALUES = """SELECT DISTINCT kind, value FROM false_positives
WHERE unmarked_at IS NULL AND kind IN ('address', 'sighting')"""
_BY_FEED = """SELECT feed, count(*) FROM false_positives
WHERE kind = 'sighting' AND unmarked_at IS NULL AND feed IS NOT NULL GROUP BY feed"""
_SIGNATURES = """SELECT value, count(*) FROM false_positives
WHERE kind = 'signature' AND unmarked_at IS NULL GROUP BY value ORDER BY 2 DESC, 1
LIMIT %(limit)s"""


def _networks(keyed: bool) -> str:
    """The distinct reporter networks of the owners whose live marks name one of
    %(kinds)s/%(values)s: one network an owner (that of their first such mark), of a router
    they own now that counts for the fleet, at most PER_ALLOCATION of one IPv6 allocation,
    as the fleet counts its reporters (server/fleet/sql.py)."""
    return f"""SELECT count(*) FROM (
    SELECT row_number() OVER (
        PARTITION BY CASE WHEN family(network) = 6
                          THEN set_masklen(network, {ALLOCATION_PREFIX}) ELSE network END
        ORDER BY network) AS place
    FROM (SELECT DISTINCT network FROM (
            SELECT DISTINCT ON (f.user_id) f.network
            FROM false_positives f JOIN routers r USING (mac)
            WHERE f.unmarked_at IS NULL AND f.network IS NOT NULL
              AND r.owner_user = f.user_id
              AND (f.kind, f.value) IN (SELECT * FROM unnest(%(kinds)s::text[],
                                                             %(values)s::text[]))
              AND {counted_router(keyed)}
            ORDER BY f.user_id, f.marked_at, f.id) per_owner) marked) ranked
WHERE place <= {PER_ALLOCATION}"""


@dataclass(frozen=True)
class Mark:
    id: int
    kind: str
    value: str
    feed: str | None
    note: str | None
    marked_at: datetime
    unmarked_at: datetime | None


async def live(cur, mac: str, kind: str, value: str) -> Mark | None:
    await execute(cur, _LIVE, {"mac": mac, "kind": kind, "value": value})
    row = await cur.fetchone()
    return None if row is None else Mark(*row)


async def lock_router(cur, mac: str) -> None:
    await execute(cur, LOCK_ROUTER, {"mac": mac})


async def lock_value(cur, value: str) -> None:
    await execute(cur, _LOCK_VALUE, {"value": value})


async def made_today(cur, mac: str, user: str) -> int:
    await execute(cur, _MADE_TODAY, {"mac": mac, "user": user})
    (count,) = await cur.fetchone()
    return count


async def end_others(cur, mac: str, user: str | None) -> list[tuple[str, str, int | None]]:
    """The router's live marks by others than `user` ended: (kind, value, effect) each."""
    await execute(cur, _OTHERS_LIVE, {"mac": mac, "user": user})
    return await cur.fetchall()


async def hand_over(cur, mac: str, address: str, effect: int) -> bool:
    """Whether another live mark of the router took over the allowlist entry `effect`."""
    await execute(cur, _HAND_OVER, {"mac": mac, "address": address, "effect": effect})
    return await cur.fetchone() is not None


async def marked_values(db: Database) -> list[tuple[str, str]]:
    return await db.fetchall(_MARKED_VALUES)


async def add(cur, mac: str, user: str, kind: str, value: str, feed: str | None,
              network: str | None, note: str | None, effect: int | None) -> Mark | None:
    """The mark stored (the router's lock held: no live one of the same value exists)."""
    await execute(cur, _ADD, {"mac": mac, "user": user, "kind": kind, "value": value,
                              "feed": feed, "network": network, "note": note,
                              "effect": effect})
    row = await cur.fetchone()
    return None if row is None else Mark(*row)


async def unmark(cur, mac: str, mark_id: int, user: str) -> tuple[str, str, int | None] | None:
    """(kind, value, effect) of the live mark undone; None when there was none."""
    await execute(cur, _UNMARK, {"mac": mac, "id": mark_id, "user": user})
    return await cur.fetchone()


async def of_router(db: Database, mac: str, user: str | None, limit: int,
                    offset: int) -> tuple[list[Mark], int]:
    """A page of the router's marks by `user` (None: by anyone), and how many there are."""
    names = {"mac": mac, "user": user, "limit": limit, "offset": offset}
    rows = await db.fetchall(_OF_ROUTER, names)
    (total,) = await db.fetchrow(_COUNT_OF_ROUTER, names)
    return [Mark(*row) for row in rows], total


async def networks(cur, values: list[tuple[str, str]], min_age: timedelta, keyed: bool) -> int:
    """The networks counting for the fleet whose owners marked one of `values`."""
    await execute(cur, _networks(keyed), {"kinds": [kind for kind, _ in values],
                                          "values": [value for _, value in values],
                                          "min_age": min_age})
    (count,) = await cur.fetchone()
    return count


async def by_feed(db: Database) -> dict[str, int]:
    """Live sighting marks per feed."""
    return dict(await db.fetchall(_BY_FEED))


async def signatures(db: Database, limit: int) -> list[tuple[str, int]]:
    """The signatures most marked, with their live marks."""
    return await db.fetchall(_SIGNATURES, {"limit": limit})

