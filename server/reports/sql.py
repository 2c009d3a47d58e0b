"""The SQL of the owners' reports (migration 0042): each owner's schedule, the reports made,
and the week's figures of a batch of routers, composed from the statements of the tables'
own capabilities (telemetry, intel, generation, routers)."""

from __future__ import annotations

from datetime import datetime

from engine.addresses import NOT_PUBLIC
from server.db.pool import Database, execute
from server.fleet.sql import endpoint
from server.generation.applied_sql import RULES_STATE
from server.enforcement.sql import BLOCKED_BETWEEN
from server.intel.sql import OWNER_SINCE, SIGHTED_BETWEEN
from server.reports.schedule import Schedule
from server.routers.sql import LAST_CONTACTS
from server.telemetry.sql import ALERTS_BETWEEN

TOP = 5  # remote addresses and signatures named a router

# Every owner (routers.owner_user with an address) and the address of their newest router.
OWNERS = """SELECT owner_user, (array_agg(owner_email ORDER BY owner_since DESC NULLS LAST,
                                          mac))[1], count(*)
FROM routers WHERE owner_user IS NOT NULL AND owner_email IS NOT NULL
  AND (%(users)s::text[] IS NULL OR owner_user = ANY(%(users)s::text[]))
GROUP BY owner_user"""
SCHEDULES = """SELECT user_id, weekly, weekday, hour, zone FROM owner_reports
WHERE user_id = ANY(%(users)s::text[])"""
LAST_ENDS = """SELECT user_id, max(week_end) FROM weekly_reports
WHERE user_id = ANY(%(users)s::text[]) GROUP BY user_id"""
# (since when each is the owner's: server/intel/sql.py OWNER_SINCE)
ROUTERS_OF = f"""SELECT owner_user, mac::text, {OWNER_SINCE} FROM routers
WHERE owner_user = ANY(%(users)s::text[]) AND owner_email IS NOT NULL ORDER BY owner_user, mac"""
SET_SCHEDULE = """INSERT INTO owner_reports AS o (user_id, weekly, weekday, hour, zone)
VALUES (%(user)s, %(weekly)s, %(weekday)s, %(hour)s, %(zone)s)
ON CONFLICT (user_id) DO UPDATE SET weekly = excluded.weekly, weekday = excluded.weekday,
    hour = excluded.hour, zone = excluded.zone, updated_at = now()"""
# A report claimed for an owner's week, in the transaction storing its notification: a
# second process or a rerun finds it taken.
CLAIM = """INSERT INTO weekly_reports (user_id, week_end, notification_id, routers)
SELECT * FROM unnest(%(users)s::text[], %(ends)s::timestamptz[], %(ids)s::uuid[],
                     %(routers)s::integer[])
ON CONFLICT DO NOTHING RETURNING user_id"""

# A batch's alerts, by (router, what, key): what is `severity`, `remote` (the side of the
# alert outside the home, as the fleet counts it: the public one, the source when both or
# neither are) or `signature`, the last two TOP a router, the most first.
_REMOTE = endpoint("a.src_ip")
ALERT_FIGURES = f"""WITH a AS MATERIALIZED (SELECT * FROM {ALERTS_BETWEEN} alerts),
ranked AS (
    SELECT mac, 'remote' AS what, host({_REMOTE}) AS key, sum(alerts) AS n,
           row_number() OVER (PARTITION BY mac ORDER BY sum(alerts) DESC,
                              host({_REMOTE})) AS place
    FROM a WHERE {_REMOTE} IS NOT NULL GROUP BY mac, {_REMOTE}
    UNION ALL
    SELECT mac, 'signature', signature_id::text, sum(alerts),
           row_number() OVER (PARTITION BY mac ORDER BY sum(alerts) DESC, signature_id)
    FROM a GROUP BY mac, signature_id)
SELECT mac::text, 'severity', severity::text, sum(alerts) FROM a GROUP BY mac, severity
UNION ALL
SELECT mac::text, what, key, n FROM ranked WHERE place <= {TOP}"""


# One router's alert summaries of a period, newest first, paged (the frontend's API).
ALERTS_PAGE = f"""SELECT hour, host(src_ip), host(dest_ip), signature_id, severity, alerts
FROM {ALERTS_BETWEEN} a ORDER BY hour DESC, alerts DESC, signature_id, src_ip, dest_ip
LIMIT %(limit)s OFFSET %(offset)s"""
ALERTS_COUNT = f"SELECT count(*) FROM {ALERTS_BETWEEN} a"


async def alerts_page(db: Database, mac: str, start: datetime, end: datetime, limit: int,
                      offset: int) -> tuple[list[tuple], int]:
    """A page of the router's hourly alert summaries in [start, end), and how many there
    are."""
    names = {**_names([mac], start, end), "limit": limit, "offset": offset}
    async with db.snapshot() as reads:
        rows = await reads.fetchall(ALERTS_PAGE, names)
        (total,) = (await reads.fetchall(ALERTS_COUNT, names))[0]
    return rows, total


def _names(macs: list[str], start: datetime, end: datetime) -> dict:
    return {"macs": macs, "start": start, "end": end, "not_public": list(NOT_PUBLIC)}


async def week_rows(db: Database, macs: list[str], start: datetime, end: datetime) -> dict:
    """The raw figures of `macs` in [start, end): each statement's rows, by name, read in
    one snapshot."""
    names = _names(macs, start, end)
    async with db.snapshot() as reads:
        return {"alerts": await reads.fetchall(ALERT_FIGURES, names),
                "sightings": await reads.fetchall(SIGHTED_BETWEEN, names),
                "rules": await reads.fetchall(RULES_STATE, names),
                "contacts": await reads.fetchall(LAST_CONTACTS, names),
                "blocked": await reads.fetchall(BLOCKED_BETWEEN, names)}


async def owners(db: Database, users: list[str] | None = None) -> list[tuple]:
    """(user, email, routers) of every owner, or of `users`."""
    return await db.fetchall(OWNERS, {"users": users})


async def schedules(db: Database, users: list[str]) -> dict[str, Schedule]:
    """The schedules `users` chose (the others have the default)."""
    return {user: Schedule(weekly, weekday, hour, zone) for user, weekly, weekday, hour, zone
            in await db.fetchall(SCHEDULES, {"users": users})}


async def last_ends(db: Database, users: list[str]) -> dict[str, datetime]:
    """The end of the week of each of `users`' last report (none: never reported)."""
    return dict(await db.fetchall(LAST_ENDS, {"users": users}))


async def routers_of(db: Database, users: list[str]
                     ) -> dict[str, list[tuple[str, datetime | None]]]:
    """Each of `users`' routers: (MAC, since when it is theirs)."""
    found: dict[str, list[tuple[str, datetime | None]]] = {}
    for user, mac, since in await db.fetchall(ROUTERS_OF, {"users": users}):
        found.setdefault(user, []).append((mac, since))
    return found


async def set_schedule(db: Database, user: str, schedule: Schedule) -> None:
    await db.execute(SET_SCHEDULE, {"user": user, "weekly": schedule.weekly,
                                    "weekday": schedule.weekday, "hour": schedule.hour,
                                    "zone": schedule.zone})


async def claim(cur, reports: list[tuple[str, datetime, str, int]]) -> set[str]:
    """Of `reports` (user, week end, notification id, routers), the users whose report this
    transaction made (the others were made already)."""
    users, ends, ids, routers = (list(column) for column in zip(*reports))
    await execute(cur, CLAIM, {"users": users, "ends": ends, "ids": ids, "routers": routers})
    return {user for (user,) in await cur.fetchall()}
