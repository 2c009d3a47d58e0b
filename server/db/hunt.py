"""The SQL of the hunt index (migration 0027): postings written with each upload, the hunts
that read them, and the record of every hunt.

`hunt_postings` holds one row per (kind, value, day, router): the first and last time an
upload carrying the value was received that day and how many records carried it. Its
primary key, (kind, value, day, mac) with `value` in byte order (COLLATE "C"), makes a hunt
one index range per indicator and day partition: its cost follows the days asked and the
postings found, not the fleet's size. A domain is stored with its labels reversed, so a
name and every name under it are one range (`com.example` to `com.example/`: `/` follows
`.`). Partitioned by day like telemetry (server/db/partitions.py) and kept
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


def _matches(codes_and_values: list[tuple[str, str, bool]]) -> tuple[list[str], dict]:
    """The SQL condition of each indicator, (code, stored value, under), and their
    parameters; `under` also matches every domain under the name."""
    parts, params = [], {}
    for n, (code, value, under) in enumerate(codes_and_values):
        params[f"c{n}"], params[f"v{n}"] = code, value
        if under:
            params[f"u{n}"] = value + "/"
            parts.append(f"(kind = %(c{n})s AND (value = %(v{n})s OR "
                         f"(value > %(v{n})s || '.' AND value < %(u{n})s)))")
        else:
            parts.append(f"(kind = %(c{n})s AND value = %(v{n})s)")
    return parts, params


def _condition(codes_and_values: list[tuple[str, str, bool]]) -> tuple[str, dict]:
    """WHERE text and parameters matching any of the indicators."""
    parts, params = _matches(codes_and_values)
    return " OR ".join(parts), params


def hunt_statement(codes_and_values: list[tuple[str, str, bool]]) -> tuple[str, dict]:
    """Per (router, indicator asked) its first and last time, records, days and the values
    matched (names under a domain), most recently seen first, at most %(limit)s of them; and
    in every row the number of such pairs in all (a window count over the groups: one pass).
    Parameters: %(since)s, %(until)s (days), %(limit)s."""
    parts, params = _matches(codes_and_values)
    condition = " OR ".join(parts)
    asked = " ".join(f"WHEN {part} THEN {n}" for n, part in enumerate(parts))
    statement = f"""SELECT mac::text, asked, min(first_seen), max(last_seen), sum(records)::bigint,
       array_agg(DISTINCT day ORDER BY day), (array_agg(DISTINCT value))[1:10],
       count(*) OVER ()
FROM (SELECT *, CASE {asked} END AS asked FROM hunt_postings
      WHERE day >= %(since)s AND day <= %(until)s AND ({condition})) matched
GROUP BY mac, asked
ORDER BY max(last_seen) DESC, mac, asked
LIMIT %(limit)s"""
    return statement, params


async def hunt(db: Database, codes_and_values: list[tuple[str, str, bool]],
               since: datetime, until: datetime, limit: int) -> list[tuple]:
    """`since`, `until`: the first instants of the first and last days searched."""
    statement, params = hunt_statement(codes_and_values)
    return await db.fetchall(statement, {**params, "since": since, "until": until,
                                         "limit": limit})


RECORD_HUNT = """INSERT INTO hunt_log (asked_by, via, indicators, since, until, matches)
VALUES (%s, %s, %s::jsonb, %s, %s, %s)"""
HUNTS = """SELECT to_char(asked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), asked_by,
       via, indicators, since, until, matches
FROM hunt_log ORDER BY asked_at DESC, id DESC LIMIT %s"""


async def record_hunt(db: Database, asked_by: str, via: str, indicators: str, since: date,
                      until: date, matches: int) -> None:
    await db.execute(RECORD_HUNT, (asked_by, via, indicators, since, until, matches))


async def hunts(db: Database, limit: int) -> list[tuple]:
    return await db.fetchall(HUNTS, (limit,))


# The days a router's postings name for an indicator (the console's drill-down reads its
# chunks for those days only).
ROUTER_DAYS = """SELECT DISTINCT day FROM hunt_postings
WHERE mac = %(mac)s AND day >= %(since)s AND ({condition}) ORDER BY day"""


async def router_days(db: Database, mac: str, codes_and_values: list[tuple[str, str, bool]],
                      since: datetime) -> list[datetime]:
    condition, params = _condition(codes_and_values)
    rows = await db.fetchall(ROUTER_DAYS.format(condition=condition),
                             {**params, "mac": mac, "since": since})
    return [row[0] for row in rows]
