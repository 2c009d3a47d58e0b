"""The SQL of the hunt index (migration 0027): postings written with each upload, the hunts
that read them, and the record of every hunt.

`hunt_postings` holds one row per (kind, value, day, router): the first and last time an
upload carrying the value was received that day and how many records carried it. Its
primary key, (kind, value, day, mac), makes a hunt one index lookup per indicator and day
partition: its cost follows the days asked and the postings found, not the fleet's size. A
domain is found with every name under it by the postings of its parents: each name posts
itself and its parents (server/telemetry/indicators.py), so a search is one exact key as for
every other kind, and one router posts a value once a day however many names it looked up
under it. Partitioned by day like telemetry (server/db/partitions.py) and kept
HUNT_RETENTION_DAYS; under Citus distributed by `mac` with the router's other tables, so an
upload's postings are written on its shard and a hunt asks every shard.
"""

from __future__ import annotations

from datetime import date, datetime

from server.db.chunks import rows_statement
from server.db.pool import Database

_POSTING_FIELDS = ("code", "value", "records")
_POSTING_VALUES = ("(%(hunt_day)s, %({p}code)s, %({p}value)s, %(mac)s, %(hunt_seen)s, "
                   "%(hunt_seen)s, %({p}records)s)")
_ADD_POSTINGS = """INSERT INTO hunt_postings AS h (day, kind, value, mac, first_seen,
    last_seen, records)
VALUES {values}
ON CONFLICT (kind, value, day, mac) DO UPDATE SET
    first_seen = least(h.first_seen, excluded.first_seen),
    last_seen = greatest(h.last_seen, excluded.last_seen),
    records = h.records + excluded.records"""


def postings_statement(params: dict) -> tuple[str, dict]:
    """The statement adding an upload's postings (Postings.params, with the router's
    `mac`): one INSERT ... VALUES, single-shard under Citus."""
    rows = params["rows"]
    values = {"mac": params["mac"], "hunt_day": params["day"], "hunt_seen": params["seen"]}
    for n, row in enumerate(rows):
        for name in _POSTING_FIELDS:
            values[f"h{n}_{name}"] = row[name]
    return rows_statement(_ADD_POSTINGS, _POSTING_VALUES, len(rows), "h"), values


def _matches(asked: list[tuple[str, str]]) -> tuple[list[str], dict]:
    """The SQL condition of each indicator, (code, stored value), and their parameters."""
    parts, params = [], {}
    for n, (code, value) in enumerate(asked):
        params[f"c{n}"], params[f"v{n}"] = code, value
        parts.append(f"(kind = %(c{n})s AND value = %(v{n})s)")
    return parts, params


def _condition(asked: list[tuple[str, str]]) -> tuple[str, dict]:
    """WHERE text and parameters matching any of the indicators."""
    parts, params = _matches(asked)
    return " OR ".join(parts), params


def _asked(parts: list[str]) -> str:
    """A CASE naming which indicator (its position) a posting matched: one only, as the
    indicators asked are distinct keys."""
    return "CASE " + " ".join(f"WHEN {part} THEN {n}" for n, part in enumerate(parts)) + " END"


def window_pairs_statement(asked: list[tuple[str, str]]) -> tuple[str, dict]:
    """The (router, indicator asked, last seen) of matching postings, at most %(limit)s, in
    no order: index lookups in the day partitions from %(since)s to %(until)s."""
    parts, params = _matches(asked)
    return (f"SELECT mac::text, {_asked(parts)}, last_seen FROM hunt_postings "
            f"WHERE day >= %(since)s AND day <= %(until)s AND ({' OR '.join(parts)}) "
            f"LIMIT %(limit)s"), params


def pairs_statement(asked: list[tuple[str, str]]) -> tuple[str, dict]:
    """Per (router, indicator asked), for the routers named only: first and last time,
    records and days. Parameters: %(since)s, %(until)s (days), %(macs)s."""
    parts, params = _matches(asked)
    return f"""SELECT mac::text, asked, min(first_seen), max(last_seen), sum(records)::bigint,
       array_agg(day ORDER BY day)
FROM (SELECT *, {_asked(parts)} AS asked FROM hunt_postings
      WHERE day >= %(since)s AND day <= %(until)s AND mac = ANY(%(macs)s::macaddr[])
        AND ({' OR '.join(parts)})) matched
GROUP BY mac, asked""", params


async def window_pairs(db: Database, asked: list[tuple[str, str]], since: datetime,
                       until: datetime, limit: int) -> list[tuple[str, int, datetime]]:
    statement, params = window_pairs_statement(asked)
    return await db.fetchall(statement, {**params, "since": since, "until": until,
                                         "limit": limit})


async def pairs(db: Database, asked: list[tuple[str, str]], since: datetime,
                until: datetime, macs: list[str]) -> list[tuple]:
    """`since`, `until`: the first instants of the first and last days searched."""
    statement, params = pairs_statement(asked)
    return await db.fetchall(statement, {**params, "since": since, "until": until,
                                         "macs": macs})


RECORD_HUNT = """INSERT INTO hunt_log (asked_by, via, indicators, since, until, matches,
    matches_exact, router)
VALUES (%s, %s, %s::jsonb, %s, %s, %s, %s, %s::macaddr)"""
HUNTS = """SELECT to_char(asked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), asked_by,
       via, indicators, since, until, matches, matches_exact, router::text
FROM hunt_log ORDER BY asked_at DESC, id DESC LIMIT %s OFFSET %s"""


async def record_hunt(db: Database, asked_by: str, via: str, indicators: str, since: date,
                      until: date, matches: int, exact: bool = True,
                      router: str | None = None) -> None:
    """One hunt, or with `router` one drill-down into that router's records (`matches`: the
    records read)."""
    await db.execute(RECORD_HUNT, (asked_by, via, indicators, since, until, matches, exact,
                                   router))


async def hunts(db: Database, limit: int, skip: int = 0) -> list[tuple]:
    return await db.fetchall(HUNTS, (limit, skip))


# The days a router's postings name for an indicator (the console's drill-down reads its
# chunks for those days only).
ROUTER_DAYS = """SELECT DISTINCT day FROM hunt_postings
WHERE mac = %(mac)s AND day >= %(since)s AND ({condition}) ORDER BY day"""


async def router_days(db: Database, mac: str, asked: list[tuple[str, str]],
                      since: datetime) -> list[datetime]:
    condition, params = _condition(asked)
    rows = await db.fetchall(ROUTER_DAYS.format(condition=condition),
                             {**params, "mac": mac, "since": since})
    return [row[0] for row in rows]
