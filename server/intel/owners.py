"""Owners told of their routers' sightings: each sighting not told yet, of a router whose
subscription names an owner (`subscriptions owner MAC --user ID --email ADDR`), becomes one
notification of type `threat_sighting`, stored in the statement's transaction that marks the
sighting told, so a rerun tells nobody twice. It is the notification service's own record:
listed in the owner's feed (GET /api/workflow/users/:userId/notifications), and emailed by
the service's retry loop when it is `pending`. An owner gets at most one email an hour, and
it names every sighting since their last one: the first sighting of a batch is emailed,
listing the batch's others and those told since the last email (LISTED of them, the rest
counted); the others are stored with channel `feed`, status `sent` (delivered to the feed).
Sightings of an hour whose email had gone wait, in the feed, for the next email: the first
run after the hour sends it, even with nothing new (a digest). Routers without an owner are
listed by `intel sightings`."""

from __future__ import annotations

import uuid

import orjson

from server.intel import sql as intel_db
from server.db.jobs import exclusive
from server.db.pool import Database, execute
from engine.intel import shown
from server.notify.sql import emailed_this_hour, store_many

TYPE = "threat_sighting"
BATCH = 1_000
LISTED = 10  # sightings an email names; the rest counted
TITLE = "A threat indicator was seen at router {mac}"
MESSAGE = ("Router {mac} exchanged traffic matching {indicator} ({kind}), listed by the threat "
           "feed {source}: first seen {first}, last seen {last}, {counted}. Open the "
           "router's page to see what was matched, and check the devices behind it.")
DIGEST_TITLE = {1: "A threat indicator was seen at your routers",
                None: "{count} threat indicators were seen at your routers"}
DIGEST_MESSAGE = ("Your routers exchanged traffic matching indicators listed by threat feeds, "
                  "since your last email:")
LINE = ("- {indicator} ({kind}) at router {mac}, listed by {source}: last seen {last}, "
        "{counted}")
MORE = "... and {count} more: see your notifications."
# A sighting that began before the router became its owner's: its records count the previous
# owner's traffic too, so they are not told (the first seen told is the ownership's start).
SINCE_YOURS = "records since the router became yours not counted apart"


def sighting_fields(row: tuple) -> dict:
    """A sighting as an owner is told it (a row of sql.py `_TOLD_COLUMNS`)."""
    mac, kind, value, source, first, last, records = row[:7]
    return {"indicator": shown(kind, value), "kind": kind, "source": source, "router": mac,
            "first_seen": first.isoformat(), "last_seen": last.isoformat(), "records": records}


def _counted(fields: dict) -> str:
    records = fields["records"]
    return SINCE_YOURS if records is None else f"{records} records"


def _line(fields: dict) -> str:
    return LINE.format(mac=fields["router"], last=fields["last_seen"],
                       counted=_counted(fields), **fields)


def _listing(rows: list[tuple]) -> str:
    """Every sighting of an email, LISTED of them by name and the rest counted."""
    lines = [_line(sighting_fields(row)) for row in rows[:LISTED]]
    if len(rows) > LISTED:
        lines.append(MORE.format(count=len(rows) - LISTED))
    return "\n".join(lines)


def _notification(row: tuple, email: bool, now, also: list[tuple]) -> tuple:
    """A sighting's notification: in the feed only, or emailed with `also` (the owner's other
    sightings since their last email) listed after it."""
    fields = sighting_fields(row)
    user, address = row[7], row[8]
    message = MESSAGE.format(mac=fields["router"], first=fields["first_seen"],
                             last=fields["last_seen"], counted=_counted(fields), **fields)
    if email and also:
        message += f"\n\nAlso since your last email ({len(also)}):\n{_listing(also)}"
        fields["also"] = len(also)
    return (str(uuid.uuid4()), user, TYPE, "email" if email else "feed",
            TITLE.format(mac=fields["router"]), message, "pending" if email else "sent",
            address, orjson.dumps(fields).decode(), None if email else now,
            now if email else None)


def _digest(rows: list[tuple], now) -> tuple:
    """One email of an owner's sightings told in their feed since their last email."""
    user, address = rows[0][7], rows[0][8]
    metadata = {"sightings": [sighting_fields(row) for row in rows[:LISTED]],
                "count": len(rows)}
    title = DIGEST_TITLE.get(len(rows), DIGEST_TITLE[None]).format(count=len(rows))
    return (str(uuid.uuid4()), user, TYPE, "email", title,
            f"{DIGEST_MESSAGE}\n{_listing(rows)}", "pending", address,
            orjson.dumps(metadata).decode(), None, now)


async def tell_owners(db: Database) -> dict:
    """Every untold sighting of an owned router, BATCH at a time, then the owners' sightings
    of an hour whose email had gone, in one email each once the hour has passed; one process
    at a time (an advisory lock, not row locks: under Citus a locking read of the
    distributed sightings is refused), another at it already telling these."""
    async with exclusive(db, "intel-tell-owners") as acquired:
        return await _tell_owners(db) if acquired else {"notifications": 0, "emailed": 0}


def _by_owner(rows: list[tuple]) -> dict[str, list[tuple]]:
    owners: dict[str, list[tuple]] = {}
    for row in rows:
        owners.setdefault(row[7], []).append(row)
    return owners


async def _tell_owners(db: Database) -> dict:
    stored = emailed = 0
    while True:
        async with db.transaction() as cur:
            await execute(cur, intel_db.UNTOLD, {"batch": BATCH})
            rows = await cur.fetchall()
            if not rows:
                break
            notifications, mailed = await _batch(cur, rows)
            await store_many(cur, notifications)
            await _mark(cur, intel_db.TOLD, rows)
            await _mark(cur, intel_db.MAILED, list(mailed.values()))
        stored += len(notifications)
        emailed += sum(1 for n in notifications if n[3] == "email")
    async with db.transaction() as cur:
        digests = await _digests(cur)
    return {"notifications": stored + digests, "emailed": emailed + digests}


def _key(row: tuple) -> tuple:
    return row[0], row[1], row[2]


async def _batch(cur, rows: list[tuple]) -> tuple[list[tuple], dict[tuple, tuple]]:
    """The batch's notifications: each owner not emailed within the hour gets its first
    sighting emailed, naming the others of the batch and those told in the feed since the
    last email; the rest are the feed's. And the sightings an email lists, by key."""
    await execute(cur, "SELECT now()")
    (now,) = await cur.fetchone()
    owners = _by_owner(rows)
    mailed_lately = await emailed_this_hour(cur, sorted(owners), TYPE)
    due = sorted(set(owners) - mailed_lately)
    earlier = _by_owner(await _unmailed(cur, due)) if due else {}
    notifications: list[tuple] = []
    mailed: dict[tuple, tuple] = {}
    for owner, theirs in owners.items():
        email = owner not in mailed_lately
        also = theirs[1:] + earlier.get(owner, []) if email else []
        notifications.append(_notification(theirs[0], email, now, also))
        notifications += [_notification(row, False, now, []) for row in theirs[1:]]
        if email:
            mailed.update((_key(row), row) for row in [theirs[0], *also])
    return notifications, mailed


async def _unmailed(cur, owners: list[str] | None) -> list[tuple]:
    await execute(cur, intel_db.UNMAILED, {"users": owners})
    return await cur.fetchall()


async def _digests(cur) -> int:
    """Owners with sightings in their feed and in no email yet, whose last email is an hour
    old: one email each listing them."""
    owners = _by_owner(await _unmailed(cur, None))
    if not owners:
        return 0
    due = set(owners) - await emailed_this_hour(cur, sorted(owners), TYPE)
    if not due:
        return 0
    await execute(cur, "SELECT now()")
    (now,) = await cur.fetchone()
    await store_many(cur, [_digest(owners[owner], now) for owner in sorted(due)])
    await _mark(cur, intel_db.MAILED, [row for owner in due for row in owners[owner]])
    return len(due)


async def _mark(cur, statement: str, rows: list[tuple]) -> None:
    """TOLD or MAILED of the sightings of `rows`."""
    if rows:
        await execute(cur, statement, ([r[0] for r in rows], [r[1] for r in rows],
                                       [r[2] for r in rows]))
