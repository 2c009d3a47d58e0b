"""The SQL of threat intelligence (migration 0031, server/intel/): feeds and their versions,
operators' decisions, the delivery statement with its rails, sightings, owners and the
notifications of sightings, and the record of every change (`intel_log`)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.addresses import NOT_PUBLIC
from server.db.channels import INTEL_LIST, notify
from server.db.pool import Database, execute
from server.routers.sql import counted as counted_router, make_due

CHANGED = notify(INTEL_LIST)
HELD_FLOOR = 10  # routers: a value fewer saw is never held, whatever the fleet's size
SWAP_SECONDS = 600  # a version of a million indicators, swapped in one transaction
# A network broader than these prefixes is held for an operator (DROP lists a few /11s: each
# blocks two million addresses at every router).
BROADEST_PREFIX = {4: 16, 6: 32}


@dataclass(frozen=True)
class Feed:
    name: str
    url: str | None
    format: str
    kind: str | None
    confidence: int
    etag: str | None
    last_modified: str | None
    attempted_at: datetime | None
    succeeded_at: datetime | None
    error: str | None
    lines: int
    refused: int
    refusals: dict
    indicators: int
    may_shrink: bool


_FEED_COLUMNS = ("name, url, format, kind, confidence, etag, last_modified, attempted_at, "
                 "succeeded_at, error, lines, refused, refusals, indicators, may_shrink")
SHRINK_FLOOR = 20  # indicators: a feed this small may change whole from one version to the next


class Shrunk(Exception):
    """A version that drops most of the feed's previous one (a feed server's truncated or
    wrong answer, not a real change): refused unless the feed may shrink."""

    def __init__(self, removed: int, previous: int):
        super().__init__(f"the new version drops {removed:,} of the previous {previous:,} "
                         "indicators: kept the previous version (`router-backend intel "
                         "may-shrink NAME yes` takes such versions)")


async def log(cur_or_db, actor: str, action: str, detail: dict) -> None:
    statement = "INSERT INTO intel_log (actor, action, detail) VALUES (%s, %s, %s)"
    params = (actor, action, json.dumps(detail, default=str))
    if isinstance(cur_or_db, Database):
        await cur_or_db.execute(statement, params)
    else:
        await execute(cur_or_db, statement, params)


async def add_feed(db: Database, name: str, url: str | None, format_: str, kind: str | None,
                   confidence: int, actor: str) -> bool:
    """False when a feed of that name exists."""
    async with db.transaction() as cur:
        await execute(cur, "INSERT INTO intel_feeds (name, url, format, kind, confidence, "
                           "added_by) VALUES (%s, %s, %s, %s, %s, %s) "
                           "ON CONFLICT (name) DO NOTHING",
                      (name, url, format_, kind, confidence, actor))
        if cur.rowcount == 0:
            return False
        await log(cur, actor, "feed added", {"feed": name, "url": url, "format": format_,
                                              "kind": kind, "confidence": confidence})
    return True


async def remove_feed(db: Database, name: str, actor: str) -> bool:
    """The feed and its indicators; sightings are history and stay."""
    async with db.transaction() as cur:
        await execute(cur, "DELETE FROM intel_feeds WHERE name = %s", (name,))
        if cur.rowcount == 0:
            return False
        await log(cur, actor, "feed removed", {"feed": name})
        await execute(cur, CHANGED)
    return True


async def feeds(db: Database, name: str | None = None) -> list[Feed]:
    rows = await db.fetchall(f"SELECT {_FEED_COLUMNS} FROM intel_feeds "
                             "WHERE %(name)s::text IS NULL OR name = %(name)s ORDER BY name",
                             {"name": name})
    return [Feed(*row) for row in rows]


async def set_may_shrink(db: Database, name: str, may_shrink: bool, actor: str) -> bool:
    """False when no feed has that name."""
    async with db.transaction() as cur:
        await execute(cur, "UPDATE intel_feeds SET may_shrink = %s WHERE name = %s",
                      (may_shrink, name))
        if cur.rowcount == 0:
            return False
        await log(cur, actor, "may shrink" if may_shrink else "may not shrink", {"feed": name})
    return True


async def record_attempt(db: Database, name: str, error: str | None, actor: str) -> None:
    """A fetch that gave no new version: failed (`error`) or not modified."""
    async with db.transaction() as cur:
        await execute(cur, "UPDATE intel_feeds SET attempted_at = now(), error = %s, "
                           "succeeded_at = CASE WHEN %s::text IS NULL THEN now() "
                           "ELSE succeeded_at END WHERE name = %s", (error, error, name))
        await log(cur, actor, "fetch failed" if error else "fetch not modified",
                  {"feed": name, **({"error": error} if error else {})})


# A version replaces the feed's indicators whole: the ones it no longer names go, the ones
# it names again keep when they were first brought (and retro-hunted), new ones come.
_VERSION_TABLE = """CREATE TEMPORARY TABLE intel_version (
    kind text, value text COLLATE "C", confidence smallint, first_seen timestamptz,
    last_seen timestamptz, expires_at timestamptz) ON COMMIT DROP"""
_GONE = """DELETE FROM intel_indicators i WHERE feed = %(feed)s AND NOT EXISTS (
    SELECT 1 FROM intel_version v WHERE v.kind = i.kind AND v.value = i.value)"""
_PUT = """INSERT INTO intel_indicators AS i (feed, kind, value, confidence, first_seen,
    last_seen, expires_at)
SELECT DISTINCT ON (kind, value) %(feed)s, kind, value, confidence, first_seen, last_seen,
       expires_at FROM intel_version ORDER BY kind, value
ON CONFLICT (feed, kind, value) DO UPDATE SET confidence = excluded.confidence,
    first_seen = least(i.first_seen, excluded.first_seen),
    last_seen = greatest(i.last_seen, excluded.last_seen), expires_at = excluded.expires_at
RETURNING (xmax = 0)"""
_FEED_DONE = """UPDATE intel_feeds SET attempted_at = now(), succeeded_at = now(), error = NULL,
    etag = %(etag)s, last_modified = %(last_modified)s, lines = %(lines)s,
    refused = %(refused)s, refusals = %(refusals)s, indicators = %(indicators)s
WHERE name = %(feed)s"""


async def swap_version(db: Database, feed: str, rows: list[tuple], lines: int,
                       refusals: dict, etag: str | None, last_modified: str | None,
                       actor: str, may_shrink: bool = True) -> tuple[int, int]:
    """The feed's indicators replaced by `rows` (kind, value, confidence, first_seen,
    last_seen, expires_at) in one transaction; (added, removed). Shrunk, and nothing
    changed, when the version drops most of the previous one of a feed of SHRINK_FLOOR or
    more and not `may_shrink`."""
    async with db.transaction() as cur, asyncio.timeout(SWAP_SECONDS):
        # The statements' own timeout is DB_TIMEOUT_SECONDS, too short for a million rows.
        await cur.execute(_VERSION_TABLE)
        async with cur.copy("COPY intel_version FROM STDIN") as copy:
            for row in rows:
                await copy.write_row(row)
        await cur.execute(_GONE, {"feed": feed})
        removed = cur.rowcount
        await cur.execute("SELECT indicators FROM intel_feeds WHERE name = %s", (feed,))
        previous = (await cur.fetchone() or (0,))[0]
        if not may_shrink and previous >= SHRINK_FLOOR and removed * 2 > previous:
            raise Shrunk(removed, previous)
        await cur.execute(_PUT, {"feed": feed})
        added = sum(1 for (new,) in await cur.fetchall() if new)
        await execute(cur, _FEED_DONE, {
            "feed": feed, "etag": etag, "last_modified": last_modified, "lines": lines,
            "refused": sum(refusals.values()), "refusals": json.dumps(refusals),
            "indicators": len(rows)})
        await log(cur, actor, "version taken", {"feed": feed, "indicators": len(rows),
                                                 "added": added, "removed": removed,
                                                 "lines": lines, "refusals": refusals})
        await execute(cur, CHANGED)
    return added, removed


async def decide(db: Database, kind: str, value: str, decision: str, note: str,
                 actor: str) -> None:
    """An operator's `suppressed` or `released` for one value, whatever feeds name it."""
    async with db.transaction() as cur:
        await execute(cur, """INSERT INTO intel_decisions (kind, value, decision, note,
                                  decided_by) VALUES (%s, %s, %s, %s, %s)
                              ON CONFLICT (kind, value) DO UPDATE SET decision = excluded.decision,
                                  note = excluded.note, decided_by = excluded.decided_by,
                                  decided_at = now(), routers = NULL""",
                      (kind, value, decision, note, actor))
        if decision == "released":  # hunted again, now that it may be sighted
            await execute(cur, "UPDATE intel_indicators SET hunted_at = NULL "
                               "WHERE kind = %s AND value = %s", (kind, value))
        await log(cur, actor, decision, {"kind": kind, "value": value, "note": note})
        await execute(cur, CHANGED)


async def decisions(db: Database) -> list[tuple]:
    return await db.fetchall("SELECT kind, value, decision, routers, note, decided_by, "
                             "decided_at FROM intel_decisions ORDER BY decided_at DESC")


# A value an operator suppressed, or the job held: neither delivered nor sighted.
_DECIDED = """EXISTS (SELECT 1 FROM intel_decisions d WHERE d.kind = i.kind
                 AND d.value = i.value AND d.decision IN ('suppressed', 'held'))"""

# An address or network overlapping one an operator suppressed or the job held as seen by
# too much of the fleet (`routers` counted; not a network held for its breadth alone): a
# held 8.8.8.8 keeps 8.8.0.0/16 of another feed out too, unless an operator released it.
_COVERED = """EXISTS (SELECT 1 FROM intel_decisions d WHERE d.kind IN ('ip', 'network')
                 AND (d.decision = 'suppressed' OR (d.decision = 'held' AND d.routers IS NOT NULL))
                 AND d.value::inet && i.value::inet)
  AND NOT EXISTS (SELECT 1 FROM intel_decisions d WHERE d.kind = i.kind
                  AND d.value = i.value AND d.decision = 'released')"""


# The routers whose sightings count toward a value's prevalence, and whose poll address
# keeps a value out, as for the fleet's lists: registered, and given their current key, at
# least %(min_age)s ago (and, when keyed, holding one).
# Why a value (of a table aliased `i`: kind, value) is never delivered nor sighted, or NULL:
# held or suppressed; else an address or network that is not public, is one of the service's
# own networks, overlaps the fleet's allowlist (or, with `mac`, that router's own), or
# overlaps a value suppressed or held as prevalent. One expression for the delivery, the
# sightings (recorded, and closed when a rail comes later) and `intel list`'s counts. A CASE,
# so that a domain's value is never cast to inet.
NOT_PUBLIC_WHY = "not public"
SERVICE_WHY = "the service's own network"
ALLOWLISTED_WHY = "allowlisted"
ROUTER_ALLOWLISTED_WHY = "on the router's allowlist"
DECIDED_WHY = "held or suppressed"
COVERED_WHY = "overlaps a held or suppressed value"
_NET = "i.value::inet"


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def withheld(mac: str | None = None, decided: bool = True) -> str:
    """`decided` False: the values are known to be neither held nor suppressed (the delivery
    left them out before, where the planner joins rather than probes a value at a time)."""
    own = (f"""WHEN EXISTS (SELECT 1 FROM firewall_allowlist a WHERE a.mac = {mac}
                         AND a.network::inet && {_NET}) THEN {_quoted(ROUTER_ALLOWLISTED_WHY)}"""
           if mac else "")
    held = f"WHEN {_DECIDED} THEN {_quoted(DECIDED_WHY)}" if decided else ""
    return f"""CASE {held}
  WHEN i.kind NOT IN ('ip', 'network') THEN NULL
  WHEN {_NET} && ANY(%(not_public)s::inet[]) THEN {_quoted(NOT_PUBLIC_WHY)}
  WHEN {_NET} && ANY(%(exempt)s::inet[]) THEN {_quoted(SERVICE_WHY)}
  WHEN EXISTS (SELECT 1 FROM firewall_allowlist a WHERE a.mac IS NULL
               AND a.network::inet && {_NET}) THEN {_quoted(ALLOWLISTED_WHY)}
  {own}
  WHEN {_COVERED} THEN {_quoted(COVERED_WHY)} END"""


def rails(exempt: list[str]) -> dict:
    """The parameters `withheld` takes."""
    return {"not_public": list(NOT_PUBLIC), "exempt": list(exempt)}


# What routers are sent: current values (not expired) of every feed, once each (its highest
# confidence, then its latest sighting by a feed), each retro-hunted already (judged by the
# fleet's prevalence before any router gets it) or released by an operator, none `withheld`,
# and no address or network overlapping a poll address of a router that protects its
# network (`_POLLED`: the poll addresses found by a range of their index, not a scan per
# value), nor a network broader than BROADEST_PREFIX unless an operator released it; at most %(max)s, the feeds in turns
# (each feed's most widely matched on the routers' firewalls first, `intel_matched`, then
# its highest confidence, then its most recently seen): a feed of a million
# values, however confident it says it is, cannot push out another's. A value several feeds
# name is its most confident feed's.
DELIVERED = f"""WITH current AS (
    SELECT DISTINCT ON (i.kind, i.value) i.kind, i.value, i.feed, i.confidence, i.last_seen,
           i.expires_at, coalesce(m.networks, 0) AS matched
    FROM intel_indicators i LEFT JOIN intel_matched m USING (kind, value)
    WHERE i.expires_at > now() AND NOT {_DECIDED} AND i.kind <> ALL(%(left_out)s::text[])
      AND (i.hunted_at IS NOT NULL OR EXISTS (SELECT 1 FROM intel_decisions d
           WHERE d.kind = i.kind AND d.value = i.value AND d.decision = 'released'))
    ORDER BY i.kind, i.value, i.confidence DESC, i.last_seen DESC),
kept AS (
SELECT i.kind, i.value, i.confidence, i.last_seen, i.expires_at, i.matched,
       row_number() OVER (PARTITION BY i.feed ORDER BY i.matched DESC, i.confidence DESC,
                                                       i.last_seen DESC, i.kind, i.value) AS turn
FROM current i
WHERE ({withheld(decided=False)}) IS NULL
  AND (i.kind NOT IN ('ip', 'network') OR (
      NOT EXISTS (SELECT 1 FROM intel_polled p
                  WHERE p.address >= network({_NET})::inet
                    AND p.address <= set_masklen(broadcast({_NET}),
                            CASE family({_NET}) WHEN 4 THEN 32 ELSE 128 END)
                    AND p.address <<= {_NET})
  AND (masklen({_NET}) >= CASE family({_NET}) WHEN 4 THEN {BROADEST_PREFIX[4]}
                                 ELSE {BROADEST_PREFIX[6]} END
       OR EXISTS (SELECT 1 FROM intel_decisions d WHERE d.kind = i.kind
                  AND d.value = i.value AND d.decision = 'released')))))
SELECT kind, value, expires_at FROM kept
ORDER BY turn, matched DESC, confidence DESC, last_seen DESC, kind, value
LIMIT %(max)s"""


# The poll addresses that protect their networks: in key mode only (in mac mode anybody who
# knows a router's MAC polls as it from any address), of routers holding a key that an
# operator subscribed or that count for the fleet. In a table of the transaction with an
# index: under Citus `routers` is distributed, and a correlated subquery from the
# coordinator's own tables into it is refused (as the fleet's job does, server/fleet/sql.py).
_POLLED = f"""CREATE TEMPORARY TABLE intel_polled ON COMMIT DROP AS
SELECT r.poll_address AS address FROM routers r
WHERE %(keyed)s AND r.poll_address IS NOT NULL
  AND EXISTS (SELECT 1 FROM router_keys k WHERE k.mac = r.mac)
  AND (r.registered_by = 'operator' OR ({counted_router(keyed=True)}))"""


async def delivered(db: Database, exempt: list[str], max_entries: int,
                    min_age: timedelta, keyed: bool, left_out: tuple[str, ...] = ()
                    ) -> list[tuple]:
    """What routers are sent (DELIVERED); `keyed`: ROUTER_AUTH=key, where poll addresses
    protect their networks; `left_out`: kinds the routers cannot load (JA4 without it)."""
    async with db.transaction() as cur:
        await execute(cur, _POLLED, {"min_age": min_age, "keyed": keyed})
        await execute(cur, "CREATE INDEX ON intel_polled (address); ANALYZE intel_polled")
        await execute(cur, DELIVERED, {**rails(exempt), "max": max_entries,
                                       "left_out": list(left_out)})
        return await cur.fetchall()


_MATCHED = "SELECT kind, value, networks FROM intel_matched"
_FORGET_MATCHED = "DELETE FROM intel_matched"
_SET_MATCHED = """INSERT INTO intel_matched (kind, value, networks)
SELECT * FROM unnest(%(kinds)s::text[], %(values)s::text[], %(networks)s::int[])"""


async def set_matched(db: Database, rows: list[tuple[str, str, int]]) -> None:
    """How widely each value matched on the routers' firewalls (kind, value, networks),
    replacing the last count (the enforcement reports' job sets it); the routers'
    documents are built again when it changed."""
    async with db.transaction() as cur:
        await execute(cur, _MATCHED)
        if sorted(tuple(row) for row in await cur.fetchall()) == sorted(rows):
            return  # the same: no document is built again
        await execute(cur, _FORGET_MATCHED)
        await execute(cur, _SET_MATCHED, {"kinds": [row[0] for row in rows],
                                          "values": [row[1] for row in rows],
                                          "networks": [row[2] for row in rows]})
        await execute(cur, CHANGED)


async def unhunted(db: Database, batch: int) -> list[tuple[str, str, str]]:
    """Current indicators no retro-hunt has searched yet: (kind, value, a feed naming it)."""
    return await db.fetchall(
        f"""SELECT kind, value, min(feed) FROM intel_indicators i
           WHERE hunted_at IS NULL AND expires_at > now() AND NOT {_DECIDED}
           GROUP BY kind, value ORDER BY min(added_at), kind, value LIMIT %s""", (batch,))


async def current(db: Database) -> list[tuple[str, str, str]]:
    """Every current indicator once: (kind, value, the first feed naming it)."""
    return await db.fetchall(f"""SELECT kind, value, min(feed) FROM intel_indicators i
                                 WHERE expires_at > now() AND NOT {_DECIDED}
                                 GROUP BY kind, value""")


# The current indicators the index's new values name (kinds as the hunt codes them, mapped
# here): each by its value, a network of 256 addresses at most (the hunted ones) by every
# address of it posted, found through the networks of /24 to /32 (IPv4) or /120 to /128
# containing the address; and any released since %(since)s, which no retro-hunt reads again.
_TOUCHED = f"""WITH posted (kind, value) AS (
    SELECT CASE code WHEN 'i' THEN 'ip' WHEN 'd' THEN 'domain' WHEN '3' THEN 'ja3'
                     WHEN '4' THEN 'ja4' WHEN 'h' THEN 'sha256' END, value
    FROM unnest(%(codes)s::text[], %(values)s::text[]) AS p (code, value)),
addresses (address) AS MATERIALIZED (  -- cast only once known to be addresses
    SELECT value::inet FROM posted WHERE kind = 'ip'),
named (kind, value) AS (
    SELECT kind, value FROM posted WHERE kind IS NOT NULL
    UNION
    SELECT 'network', set_masklen(address, masklen(address) - bits)::cidr::text
    FROM addresses, generate_series(0, 8) AS bits
    UNION
    SELECT kind, value FROM intel_decisions
    WHERE decision = 'released' AND decided_at >= %(since)s)
SELECT i.kind, i.value, min(i.feed) FROM intel_indicators i JOIN named
    ON i.kind = named.kind AND i.value = named.value COLLATE "C"
WHERE i.expires_at > now() AND NOT {_DECIDED}
GROUP BY i.kind, i.value"""


async def touched(db: Database, posted: list[tuple[str, str]], since: datetime
                  ) -> list[tuple[str, str, str]]:
    """The current indicators named by `posted` (the hunt index's (code, value) pairs) or
    released since `since`: (kind, value, the first feed naming it)."""
    return await db.fetchall(_TOUCHED, {"codes": [code for code, _ in posted],
                                        "values": [value for _, value in posted],
                                        "since": since})


async def live_mark(db: Database) -> datetime | None:
    """Where the last minute's match began reading the index (None: it never ran)."""
    row = await db.fetchone("SELECT since FROM intel_live_mark")
    return row[0] if row else None


async def set_live_mark(db: Database, since: datetime) -> None:
    await db.execute("""INSERT INTO intel_live_mark (since) VALUES (%s)
                        ON CONFLICT (one) DO UPDATE SET since = excluded.since""", (since,))


async def mark_hunted(cur, values: list[tuple[str, str]]) -> None:
    """The values judged by a retro-hunt (held, or sighted), and so delivered from now on:
    every process rebuilds its document."""
    await execute(cur, """UPDATE intel_indicators i SET hunted_at = now()
        FROM unnest(%s::text[], %s::text[]) AS v (kind, value)
        WHERE i.kind = v.kind AND i.value = v.value COLLATE "C" AND i.hunted_at IS NULL""",
                  ([k for k, _ in values], [v for _, v in values]))
    if cur.rowcount:
        await execute(cur, CHANGED)


# A router's sighting of an indicator, once, unless the value is `withheld` for it: a rerun
# widens its span and counts (the larger of what was known and what this hunt saw: a hunt
# reads whole days, never a part twice), and writes nothing when it saw nothing new (the
# match each minute finds the same again).
# A retro-hunt's sightings (hundreds of thousands): COPY'd into a table of the transaction's
# own, then added in one statement (a fifth of the time of arrays bound as parameters,
# whose lists psycopg dumps in Python).
_SIGHTED_TABLE = """CREATE TEMPORARY TABLE sighted (mac macaddr, kind text, value text,
    source text, first_seen timestamptz, last_seen timestamptz, days integer, records bigint)
ON COMMIT DROP"""
_SIGHTED_COPY = "COPY sighted FROM STDIN"
_SIGHTED = f"""WITH added AS (
    INSERT INTO intel_sightings AS s (mac, kind, value, source, first_seen, last_seen, days,
        records)
    SELECT i.* FROM sighted i WHERE ({withheld("i.mac")}) IS NULL
    ON CONFLICT (mac, kind, value) DO UPDATE SET
        first_seen = least(s.first_seen, excluded.first_seen),
        last_seen = greatest(s.last_seen, excluded.last_seen),
        days = greatest(s.days, excluded.days), records = greatest(s.records, excluded.records)
    WHERE s.first_seen > excluded.first_seen OR s.last_seen < excluded.last_seen
       OR s.days < excluded.days OR s.records < excluded.records
    RETURNING (xmax = 0) AS new)
SELECT count(*) FILTER (WHERE new) FROM added"""


async def record_sightings(cur, rows: list[tuple], exempt: list[str]) -> int:
    """Rows (mac, kind, value, source, first_seen, last_seen, days, records), in the
    transaction of `cur`, but for values withheld (`exempt`: the service's own networks);
    how many are new."""
    if not rows:
        return 0
    await execute(cur, _SIGHTED_TABLE)
    async with cur.copy(_SIGHTED_COPY) as copy:
        for row in rows:
            await copy.write_row(row)
    await execute(cur, _SIGHTED, rails(exempt))
    return (await cur.fetchone())[0]


# Open sightings of values now withheld (an allowlist entry, a decision, or sightings
# recorded before the rails applied to them) closed with why: listed, never told.
_CLOSE = f"""UPDATE intel_sightings i SET closed_at = now(), closed_why = ({withheld("i.mac")})
WHERE i.closed_at IS NULL AND (%(all)s OR i.told_at IS NULL)
  AND ({withheld("i.mac")}) IS NOT NULL"""


async def close_withheld(db: Database, exempt: list[str], untold_only: bool) -> int:
    """Open sightings of withheld values closed (only those not told yet, when
    `untold_only`: the few the minute's match tells); how many."""
    async with db.transaction() as cur:
        await execute(cur, _CLOSE, {**rails(exempt), "all": not untold_only})
        return cur.rowcount


# Why each feed's current values are withheld, counted (`intel list`).
_WITHHELD_COUNTS = f"""SELECT feed, why, count(*) FROM (
    SELECT i.feed, ({withheld()}) AS why FROM intel_indicators i WHERE i.expires_at > now()
) w WHERE why IS NOT NULL GROUP BY feed, why"""


async def withheld_counts(db: Database, exempt: list[str]) -> dict[str, dict[str, int]]:
    """{feed: {why: values}} of the values never delivered nor sighted."""
    counts: dict[str, dict[str, int]] = {}
    for feed, why, n in await db.fetchall(_WITHHELD_COUNTS, rails(exempt)):
        counts.setdefault(feed, {})[why] = n
    return counts


async def hold(cur, held: list[tuple[str, str, int | None]], note: str, actor: str) -> int:
    """Values held for an operator (`note` says why), unless an operator decided on them;
    how many were not held before."""
    if not held:
        return 0
    await execute(cur, """INSERT INTO intel_decisions (kind, value, decision, routers, note,
                              decided_by)
        SELECT kind, value, 'held', routers, %s, %s
        FROM unnest(%s::text[], %s::text[], %s::integer[]) AS h (kind, value, routers)
        ON CONFLICT (kind, value) DO UPDATE SET routers = excluded.routers
            WHERE intel_decisions.decision = 'held'
              AND intel_decisions.routers IS DISTINCT FROM excluded.routers
        RETURNING (xmax = 0)""",
                  (note, actor, [h[0] for h in held], [h[1] for h in held],
                   [h[2] for h in held]))
    newly = sum(1 for (new,) in await cur.fetchall() if new)
    if newly:  # (the match each minute holds the same values again: no rebuild for that)
        await execute(cur, CHANGED)
        if any(kind in ("ip", "network") and routers is not None
               for kind, _, routers in held):  # no router's own firewall blocks it either
            await make_due(cur, None)
    return newly


async def registered_routers(db: Database) -> int:
    return (await db.fetchone("SELECT count(*) FROM routers"))[0]


async def counted_routers(db: Database, min_age: timedelta, keyed: bool) -> int:
    """How many routers count toward a value's prevalence (`trusted_routers`): the share
    that holds a value is taken of these, so that fresh MACs cannot lift one out of a hold."""
    (counted,) = await db.fetchall(f"SELECT count(*) FROM routers r "
                                   f"WHERE {counted_router(keyed)}", {"min_age": min_age})
    return counted[0]


async def trusted_routers(db: Database, min_age: timedelta, keyed: bool) -> set[str]:
    """The routers whose sightings count toward a value's prevalence, as toward the fleet's
    lists: registered at least `min_age` ago (and, when `keyed`, holding a key), so that
    fresh MACs cannot get a real indicator held."""
    return {mac for (mac,) in await db.fetchall(
        f"SELECT r.mac::text FROM routers r WHERE {counted_router(keyed)}",
        {"min_age": min_age})}


SIGHTINGS = """SELECT s.kind, s.value, s.source, s.mac::text, s.first_seen, s.last_seen,
       s.days, s.records, s.found_at, s.told_at, r.owner_user IS NOT NULL, s.closed_why
FROM intel_sightings s LEFT JOIN routers r USING (mac)
WHERE %(mac)s::macaddr IS NULL OR s.mac = %(mac)s
ORDER BY s.first_seen, s.mac, s.kind, s.value LIMIT %(limit)s"""


async def sightings(db: Database, mac: str | None = None, limit: int = 100_000) -> list[tuple]:
    return await db.fetchall(SIGHTINGS, {"mac": mac, "limit": limit})


async def set_owner(db: Database, mac: str, user: str | None, email: str | None,
                    actor: str) -> bool:
    """An owner's ownership ended (another user, or none, set) is recorded: whoever owns the
    router next is told only of what it saw from then on. A first owner is told of what it
    saw before (an owner subscribes the router they installed)."""
    async with db.transaction() as cur:
        await execute(cur, "UPDATE routers SET owner_since = CASE WHEN owner_user IS NOT NULL "
                           "AND owner_user IS DISTINCT FROM %(user)s THEN now() "
                           "ELSE owner_since END, "
                           "owner_user = %(user)s, owner_email = %(email)s WHERE mac = %(mac)s",
                      {"user": user, "email": email, "mac": mac})
        if cur.rowcount == 0:
            return False
        await log(cur, actor, "owner set", {"mac": mac, "user": user, "email": email})
    return True


# A router's owner, and since when it is theirs: from the ownership's change, or for its
# first owner from the hour of the router's registration (a MAC removed and registered
# again starts afresh: its earlier subscription's telemetry is not the new owner's; the
# hourly summaries of its first hour are).
OWNER_SINCE = "coalesce(owner_since, date_trunc('hour', registered_at, 'UTC'))"
OWNER_OF = f"SELECT owner_user, {OWNER_SINCE} FROM routers WHERE mac = %s"


async def owner_in(cur, mac: str) -> str | None:
    """The router's owner, read in the caller's transaction (None: none, or no router)."""
    await execute(cur, OWNER_OF, (mac,))
    row = await cur.fetchone()
    return None if row is None else row[0]


async def owner_of(db: Database, mac: str) -> tuple[bool, str | None, datetime | None]:
    """Whether `mac` is registered, its owner's user id (None: no owner), and since when
    the router is theirs (OWNER_OF)."""
    row = await db.fetchone(OWNER_OF, (mac,))
    return (False, None, None) if row is None else (True, row[0], row[1])


async def routers_without_owner(db: Database) -> list[str]:
    """Routers with a sighting nobody can be told of."""
    return [mac for (mac,) in await db.fetchall(
        """SELECT DISTINCT s.mac::text FROM intel_sightings s JOIN routers r USING (mac)
           WHERE r.owner_user IS NULL ORDER BY 1""")]


# Sightings not told yet nor closed, of routers with an owner, oldest first; none that ended
# before the ownership began (before the previous owner's ended: their traffic), nor before
# the router's current key was issued (an earlier holder's, whose enrollment an operator
# reset); a first sighting before the ownership is told as its start, and its records, which
# count the previous owner's traffic too (the index counts whole days), are not told.
# What an owner is told of a sighting (server/intel/owners.py reads the rows in this shape).
_TOLD_COLUMNS = """s.mac::text, s.kind, s.value, s.source,
       greatest(s.first_seen, r.owner_since), s.last_seen,
       CASE WHEN s.first_seen < r.owner_since THEN NULL ELSE s.records END, r.owner_user,
       r.owner_email"""
UNTOLD = f"""SELECT {_TOLD_COLUMNS}
FROM intel_sightings s JOIN routers r USING (mac)
WHERE s.told_at IS NULL AND s.closed_at IS NULL AND r.owner_user IS NOT NULL
  AND r.owner_email IS NOT NULL AND s.last_seen >= coalesce(r.owner_since, '-infinity')
  AND NOT EXISTS (SELECT 1 FROM router_keys k WHERE k.mac = s.mac
                  AND k.issued_at > s.last_seen)
ORDER BY s.found_at, s.mac, s.kind, s.value LIMIT %(batch)s"""
TOLD = """UPDATE intel_sightings s SET told_at = now()
WHERE (s.mac, s.kind, s.value) IN (
    SELECT mac, kind, value COLLATE "C"
    FROM unnest(%s::macaddr[], %s::text[], %s::text[]) AS t (mac, kind, value))"""
# Sightings told in an owner's feed but in no email yet (their hour's email had gone), of the
# current ownership, oldest first: listed in the owner's next email.
UNMAILED = f"""SELECT {_TOLD_COLUMNS}
FROM intel_sightings s JOIN routers r USING (mac)
WHERE s.told_at IS NOT NULL AND s.mailed_at IS NULL AND s.closed_at IS NULL
  AND r.owner_user IS NOT NULL AND r.owner_email IS NOT NULL
  AND (%(users)s::text[] IS NULL OR r.owner_user = ANY(%(users)s::text[]))
  AND s.told_at >= coalesce(r.owner_since, '-infinity')
ORDER BY r.owner_user, s.told_at, s.mac, s.kind, s.value"""
# Listed in an email (the batch's, told in the same transaction, or earlier ones).
MAILED = """UPDATE intel_sightings s SET mailed_at = now()
WHERE (s.mac, s.kind, s.value) IN (
    SELECT mac, kind, value COLLATE "C"
    FROM unnest(%s::macaddr[], %s::text[], %s::text[]) AS t (mac, kind, value))"""


# A router removed (server/removal.py): its sightings.
FORGET_ROUTER = "DELETE FROM intel_sightings WHERE mac = %(mac)s"
# The sightings of the routers %(macs)s active in [%(start)s, %(end)s), as owners are told
# them (the current ownership's, not a router key's earlier holder's), SIGHTINGS_LISTED a
# router newest first, each with its router's count: for the owners' reports
# (server/reports/).
SIGHTINGS_LISTED = 5
SIGHTED_BETWEEN = f"""SELECT * FROM (
    SELECT {_TOLD_COLUMNS}, count(*) OVER (PARTITION BY s.mac) AS sightings,
           row_number() OVER (PARTITION BY s.mac ORDER BY s.last_seen DESC, s.kind, s.value)
               AS place
    FROM intel_sightings s JOIN routers r USING (mac)
    WHERE s.mac = ANY(%(macs)s::macaddr[]) AND s.closed_at IS NULL
      AND s.last_seen >= %(start)s AND s.first_seen < %(end)s
      AND s.last_seen >= coalesce(r.owner_since, '-infinity')
      AND NOT EXISTS (SELECT 1 FROM router_keys k WHERE k.mac = s.mac
                      AND k.issued_at > s.last_seen)) listed
WHERE place <= {SIGHTINGS_LISTED}"""


# --- Owners' marks of a sighting as not an attack (server/feedback/) ---

FALSE_POSITIVE_WHY = "not an attack (its owner)"
OWNERS = "owners"  # who decided a value held by owners' marks (intel_decisions.decided_by)


async def sighting_source(db: Database, mac: str, kind: str, value: str) -> str | None:
    """The feed of the router's sighting of (kind, value) of its current ownership, as its
    owner is shown it; None when it has none."""
    row = await db.fetchone(
        f"SELECT s.source {_SIGHTINGS_OF} AND s.kind = %(kind)s AND s.value = %(value)s",
        {"mac": mac, "kind": kind, "value": value, "since": "-infinity"})
    return None if row is None else row[0]


async def listed_now(cur, kind: str, value: str) -> bool:
    """Whether a feed lists the value now (delivered to routers unless withheld)."""
    await execute(cur, "SELECT 1 FROM intel_indicators WHERE kind = %s AND value = %s "
                       "AND expires_at > now() LIMIT 1", (kind, value))
    return await cur.fetchone() is not None


async def close_as_false_positive(cur, mac: str, kind: str, value: str, closed: bool) -> None:
    """The sighting closed as not an attack, or (`closed` False) reopened when it was so
    closed, or closed for the router's allowlist (the entry the mark made)."""
    if closed:
        await execute(cur, "UPDATE intel_sightings SET closed_at = now(), closed_why = %s "
                           "WHERE mac = %s AND kind = %s AND value = %s AND closed_at IS NULL",
                      (FALSE_POSITIVE_WHY, mac, kind, value))
    else:  # (the match job closes it again if anything else still withholds it)
        await execute(cur, "UPDATE intel_sightings SET closed_at = NULL, closed_why = NULL "
                           "WHERE mac = %s AND kind = %s AND value = %s "
                           "AND closed_why IN (%s, %s)",
                      (mac, kind, value, FALSE_POSITIVE_WHY, ROUTER_ALLOWLISTED_WHY))


async def hold_for_owners(cur, kind: str, value: str, networks: int | None) -> None:
    """The value held for an operator as marked not an attack by owners of `networks`
    networks (an operator's decision, or a hold of the job's, stays as it is); with None,
    that hold lifted (marks undone)."""
    if networks is None:
        await execute(cur, "DELETE FROM intel_decisions WHERE kind = %s AND value = %s "
                           "AND decision = 'held' AND decided_by = %s", (kind, value, OWNERS))
        if cur.rowcount:
            await log(cur, OWNERS, "hold lifted", {"kind": kind, "value": value})
            await execute(cur, CHANGED)
        return
    note = f"marked not an attack by owners on {networks} networks"
    await execute(cur, "INSERT INTO intel_decisions (kind, value, decision, note, decided_by) "
                       "VALUES (%s, %s, 'held', %s, %s) ON CONFLICT (kind, value) DO UPDATE "
                       "SET note = excluded.note WHERE intel_decisions.decided_by = %s",
                  (kind, value, note, OWNERS, OWNERS))
    if cur.rowcount:
        await log(cur, OWNERS, "held", {"kind": kind, "value": value, "note": note})
        await execute(cur, CHANGED)


# One router's sightings of the current ownership, last seen from %(since)s, newest first,
# paged (the frontend's API), with why each was closed (NULL: open).
_SIGHTINGS_OF = """FROM intel_sightings s JOIN routers r USING (mac)
WHERE s.mac = %(mac)s AND s.last_seen >= %(since)s
  AND s.last_seen >= coalesce(r.owner_since, '-infinity')
  AND NOT EXISTS (SELECT 1 FROM router_keys k WHERE k.mac = s.mac
                  AND k.issued_at > s.last_seen)"""
SIGHTINGS_PAGE = f"""SELECT {_TOLD_COLUMNS}, s.closed_why {_SIGHTINGS_OF}
ORDER BY s.last_seen DESC, s.kind, s.value LIMIT %(limit)s OFFSET %(offset)s"""
SIGHTINGS_COUNT = f"SELECT count(*) {_SIGHTINGS_OF}"


async def sightings_page(db: Database, mac: str, since: datetime, limit: int,
                         offset: int) -> tuple[list[tuple], int]:
    names = {"mac": mac, "since": since, "limit": limit, "offset": offset}
    async with db.snapshot() as reads:
        rows = await reads.fetchall(SIGHTINGS_PAGE, names)
        (total,) = (await reads.fetchall(SIGHTINGS_COUNT, names))[0]
    return rows, total


async def sightings_by_feed(db: Database) -> dict[str, int]:
    """The sightings each feed's values made (the feed that named a value first)."""
    return dict(await db.fetchall("SELECT source, count(*) FROM intel_sightings "
                                  "GROUP BY source"))
