"""Router registrations (subscriptions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import psycopg

from server.db.activation_days import last_rolled_contact
from server.db.channels import ROUTER_KEYS, notify
from server.db.pool import Database, execute


def counted(keyed: bool) -> str:
    """The condition (on `routers r`) of a router that counts for the fleet: registered at
    least %(min_age)s ago and holding no key issued since (and, when `keyed`, a key at all),
    so that fresh MACs weigh nothing. One definition for the fleet's lists, the intel's
    prevalence and the hunt index's budgets."""
    held_key = "AND EXISTS (SELECT 1 FROM router_keys k WHERE k.mac = r.mac)" if keyed else ""
    return f"""r.registered_at <= now() - %(min_age)s
  AND NOT EXISTS (SELECT 1 FROM router_keys k WHERE k.mac = r.mac
                  AND k.issued_at > now() - %(min_age)s) {held_key}"""


# One statement: a new router is registered and queued for its first generation together.
_REGISTER = (
    "WITH registered AS (INSERT INTO routers (mac, registered_by) VALUES (%(mac)s, %(by)s) "
    "ON CONFLICT (mac) DO NOTHING RETURNING mac) "
    "INSERT INTO generation_queue (mac) SELECT mac FROM registered ON CONFLICT DO NOTHING")


# Open registration's limit per client address bucket (server/web/limits.py address_bucket),
# counted in the database so that it holds across processes and concurrent requests: the
# bucket's advisory lock first (serialising its registrations), then one statement that
# counts the bucket's last minute and inserts when under the limit.
REGISTRATION_LOCK_CLASS = 7_302_146  # first key of the per-bucket advisory locks
LOCK_BUCKET = "SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(%(bucket)s))"
_FROM_BUCKET = ("FROM routers WHERE registered_from = %(bucket)s "
                "AND registered_at > now() - interval '1 minute'")
UNDER_LIMIT = f"(SELECT count(*) {_FROM_BUCKET}) < %(limit)s"
# Seconds until the bucket's oldest registration of the last minute leaves it.
BUCKET_WAIT = (f"(SELECT ceil(extract(epoch FROM min(registered_at) + interval '1 minute' "
               f"- now())) {_FROM_BUCKET})")
_REGISTER_FROM = f"""
WITH registered AS (
    INSERT INTO routers (mac, registered_by, registered_from)
    SELECT %(mac)s, 'auto', %(bucket)s WHERE {UNDER_LIMIT}
    ON CONFLICT (mac) DO NOTHING RETURNING mac),
queued AS (
    INSERT INTO generation_queue (mac) SELECT mac FROM registered ON CONFLICT DO NOTHING)
SELECT EXISTS (SELECT 1 FROM registered), EXISTS (SELECT 1 FROM routers WHERE mac = %(mac)s),
       {BUCKET_WAIT}, {UNDER_LIMIT}"""


@dataclass(frozen=True)
class Registration:
    new: bool          # registered now
    known: bool        # registered before
    wait_seconds: int  # when neither: until the bucket may register again

    @property
    def limited(self) -> bool:
        return not (self.new or self.known)


def bucket_params(bucket: str, limit: int) -> dict:
    return {"lock_class": REGISTRATION_LOCK_CLASS, "bucket": bucket, "limit": limit}


async def register_from(db: Database, mac: str, bucket: str, limit: int) -> Registration:
    """Register `mac` as a router that called from `bucket`, unless the bucket registered
    `limit` routers in the last minute (across every process)."""
    params = {**bucket_params(bucket, limit), "mac": mac}
    async with db.transaction() as cur:
        new, known, wait = await from_bucket(cur, _REGISTER_FROM, params,
                                             lambda row: row[0] or row[1])
    return Registration(new, known, max(1, int(wait or 1)))


async def from_bucket(cur: psycopg.AsyncCursor, statement: str, params: dict,
                      found: Callable[[tuple], bool]) -> tuple:
    """A registration statement's row but its last column (whether it tried to insert the
    router), run after the bucket's lock. Run once more when it tried and the router is not
    `found` (registered now or before): a router another bucket's transaction was inserting
    made the INSERT wait and do nothing, yet is not in the statement's snapshot (the next
    statement's is); read as "the bucket is full", it was a false 429 that left the bucket
    full in the process's memory."""
    await execute(cur, LOCK_BUCKET, params)
    for _ in range(2):
        await execute(cur, statement, params)
        *row, tried = await cur.fetchone()
        if found(row) or not tried:
            break
    return tuple(row)


# A router's last activation: its newest, or (silent since before today, the activations
# kept one by one) its newest rolled-up day's last one. Its last upload: its newest telemetry
# chunk of either kind (each read backwards along the key, stopping at the first). Polls, 304s
# included, write nothing, so no read can say when a router last polled.
SUBSCRIPTIONS = (
    "SELECT r.mac::text, r.registered_at, r.registered_by, r.note, "
    f"coalesce(last.activated_at, {last_rolled_contact('r.mac')}), "
    "greatest((SELECT received_at FROM telemetry_chunks c WHERE c.mac = r.mac "
    "AND c.kind = 'events' ORDER BY c.received_at DESC LIMIT 1), "
    "(SELECT received_at FROM telemetry_chunks c WHERE c.mac = r.mac "
    "AND c.kind = 'cfm' ORDER BY c.received_at DESC LIMIT 1)) "
    "FROM routers r LEFT JOIN LATERAL (SELECT activated_at FROM activations a "
    "WHERE a.mac = r.mac ORDER BY a.activated_at DESC LIMIT 1) last ON true ORDER BY r.mac")


_MAKE_DUE = ("UPDATE generation_queue SET next_due_at = now() "
             "WHERE (%(mac)s::macaddr IS NULL OR mac = %(mac)s) AND next_due_at > now()")


async def make_due(cur: psycopg.AsyncCursor, mac: str | None) -> int:
    """Make one router (or, with None, every router) due for generation now, inside the
    caller's transaction; how many were not due already."""
    await execute(cur, _MAKE_DUE, {"mac": mac})
    return cur.rowcount


async def register(db: Database, mac: str, registered_by: str = "auto") -> bool:
    """Register `mac` and queue it for generation; return True when it was new."""
    return await db.execute(_REGISTER, {"mac": mac, "by": registered_by}) == 1


async def is_registered(db: Database, mac: str) -> bool:
    return await db.fetchone("SELECT 1 FROM routers WHERE mac = %s", (mac,)) is not None


async def is_known(db: Database, mac: str) -> bool:
    """Registered, or with telemetry still stored (a removed router's stays until retention)."""
    return bool((await db.fetchone(
        "SELECT EXISTS (SELECT 1 FROM routers WHERE mac = %(mac)s) "
        "OR EXISTS (SELECT 1 FROM telemetry_chunks WHERE mac = %(mac)s)", {"mac": mac}))[0])


async def list_subscriptions(db: Database) -> list[tuple]:
    """(mac, registered_at, registered_by, note, last activation, last upload) for every
    router; each read newest-first from a primary key of the newest partitions first,
    stopping at the first found."""
    return await db.fetchall(SUBSCRIPTIONS)


async def subscribe(db: Database, mac: str, note: str | None) -> bool:
    """Add (or mark as operator-added) a subscription; True when the router was new."""
    new = await register(db, mac, registered_by="operator")
    await db.execute("UPDATE routers SET registered_by = 'operator', note = coalesce(%s, note) "
                     "WHERE mac = %s", (note, mac))
    return new


# Sent in the transaction that replaces or revokes a router's key (delivered at its commit):
# every server process LISTENs on this channel and forgets the key it trusted
# (server/routers/keys.py). A statement without a table, as PAYLOAD_CHANGED, so that under
# Citus it runs on the coordinator, where the listeners are.
KEY_CHANGED = notify(ROUTER_KEYS, "%(mac)s::text")


async def remove(cur: psycopg.AsyncCursor, mac: str) -> bool:
    """The router's row deleted, in the caller's transaction, once every capability has
    forgotten it (server/removal.py); False when it was not registered."""
    await execute(cur, "DELETE FROM routers WHERE mac = %s", (mac,))
    if cur.rowcount != 1:
        return False
    await execute(cur, KEY_CHANGED, {"mac": mac})  # its key went with it
    return True


# Each router of %(macs)s's last contact (activation) before %(end)s: its newest activation
# kept one by one, else its newest rolled-up day's last one (server/db/activation_days.py)
# of the CONTACT_DAYS before; NULL: none in that time, or none since its owner's ownership
# began (the previous owner's polls are not theirs to be told).
CONTACT_DAYS = 35
LAST_CONTACTS = f"""SELECT r.mac::text, coalesce(
    (SELECT a.activated_at FROM activations a WHERE a.mac = r.mac AND a.activated_at < %(end)s
     AND a.activated_at >= coalesce(r.owner_since, r.registered_at)
     ORDER BY a.activated_at DESC LIMIT 1),
    (SELECT max(d.last_seen) FROM activation_days d WHERE d.mac = r.mac
     AND d.day > %(end)s - interval '{CONTACT_DAYS} days' AND d.day < %(end)s
     AND d.last_seen < %(end)s AND d.last_seen >= coalesce(r.owner_since, r.registered_at)))
FROM routers r WHERE r.mac = ANY(%(macs)s::macaddr[])"""


# A router's newest known client address (its polls'): its newest activation kept one by
# one, else its newest rolled-up day's. What a router's owner's marks count for
# (server/feedback/): the network it reaches the service from.
_LAST_ADDRESS = f"""SELECT host(coalesce(
    (SELECT a.address FROM activations a WHERE a.mac = %(mac)s AND a.address IS NOT NULL
     ORDER BY a.activated_at DESC LIMIT 1),
    (SELECT d.address FROM activation_days d WHERE d.mac = %(mac)s AND d.address IS NOT NULL
     AND d.day > now() - interval '{CONTACT_DAYS} days' ORDER BY d.last_seen DESC LIMIT 1)))"""


async def last_address(db: Database, mac: str) -> str | None:
    row = await db.fetchone(_LAST_ADDRESS, {"mac": mac})
    return None if row is None else row[0]
