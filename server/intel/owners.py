"""Owners told of their routers' sightings: each sighting not told yet, of a router whose
subscription names an owner (`subscriptions owner MAC --user ID --email ADDR`), becomes one
notification of type `threat_sighting`, stored in the statement's transaction that marks the
sighting told, so a rerun tells nobody twice. It is the notification service's own record:
listed in the owner's feed (GET /api/workflow/users/:userId/notifications), and emailed by
the service's retry loop when it is `pending`. An owner gets at most one email an hour: the
first sighting of the hour is emailed, the others are stored with channel `feed`, status
`sent` (delivered to the feed). Routers without an owner are listed by `intel sightings`."""

from __future__ import annotations

import uuid

import orjson

from server.intel import sql as intel_db
from server.db.jobs import exclusive
from server.db.pool import Database, execute
from server.notify.sql import emailed_this_hour, store_many

TYPE = "threat_sighting"
BATCH = 1_000
TITLE = "A threat indicator was seen at router {mac}"
MESSAGE = ("Router {mac} exchanged traffic matching {indicator} ({kind}), listed by the threat "
           "feed {source}: first seen {first}, last seen {last}, {records} records. Open the "
           "router's page to see what was matched, and check the devices behind it.")
def shown(kind: str, value: str) -> str:
    """An indicator as people read it: a domain's labels back in order."""
    return ".".join(reversed(value.split("."))) if kind == "domain" else value


def _notification(row: tuple, email: bool, now) -> tuple:
    mac, kind, value, source, first, last, records, user, address = row
    indicator = shown(kind, value)
    iso = {"first": first.isoformat(), "last": last.isoformat()}
    metadata = {"indicator": indicator, "kind": kind, "source": source, "router": mac,
                "first_seen": iso["first"], "last_seen": iso["last"], "records": records}
    return (str(uuid.uuid4()), user, TYPE, "email" if email else "feed",
            TITLE.format(mac=mac), MESSAGE.format(mac=mac, indicator=indicator, kind=kind,
                                                  source=source, records=records, **iso),
            "pending" if email else "sent", address, orjson.dumps(metadata).decode(),
            None if email else now, now if email else None)


async def tell_owners(db: Database) -> dict:
    """Every untold sighting of an owned router, BATCH at a time; one process at a time (an
    advisory lock, not row locks: under Citus a locking read of the distributed sightings
    is refused), another at it already telling these."""
    async with exclusive(db, "intel-tell-owners") as acquired:
        return await _tell_owners(db) if acquired else {"notifications": 0, "emailed": 0}


async def _tell_owners(db: Database) -> dict:
    stored = emailed = 0
    while True:
        async with db.transaction() as cur:
            await execute(cur, intel_db.UNTOLD, {"batch": BATCH})
            rows = await cur.fetchall()
            if not rows:
                break
            await execute(cur, "SELECT now()")
            (now,) = await cur.fetchone()
            owners = sorted({row[7] for row in rows})
            mailed = await emailed_this_hour(cur, owners, TYPE)
            notifications = []
            for row in rows:
                email = row[7] not in mailed
                mailed.add(row[7])
                notifications.append(_notification(row, email, now))
            await store_many(cur, notifications)
            await execute(cur, intel_db.TOLD, ([r[0] for r in rows], [r[1] for r in rows],
                                               [r[2] for r in rows]))
        stored += len(rows)
        emailed += sum(1 for n in notifications if n[3] == "email")
    return {"notifications": stored, "emailed": emailed}
