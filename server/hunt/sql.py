"""The SQL of the hunt index (migrations 0027, 0030, 0032): the uploads pending for the
indexer (server/hunt/indexer.py), the postings it writes, the packing of past days into
blocks (server/hunt/packing.py), the hunts that read both, and the record of every
hunt.

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

import json
from datetime import date, datetime

from server.db.rows import RowsInsert
from server.db.pool import Database
from server.routers.sql import counted

NETWORKS_KEPT = 8  # the networks a router's uploads came from in a day, at most (the first)
# Where the counters of a router's day stop (integer columns): past it a router's records
# would fail every statement of its day's uploads, each then set aside.
INTEGER_MAX = 2**31 - 1
_POSTING_FIELDS = ("code", "value", "records")
_POSTING_ROW = "(%s, %s, %s)"
# Where an upload's router-day is counted (hunt_budgets, migration 0030): the postings it
# added, its records not indexed (`unindexed`: those carrying a value left out), and the
# networks its uploads came from (the first few).
_COUNT_ROUTER_DAY = f"""ON CONFLICT (mac, day) DO UPDATE SET
    postings = b.postings + excluded.postings,
    unindexed = least(b.unindexed::bigint + excluded.unindexed, {INTEGER_MAX}),
    networks = CASE WHEN excluded.networks <@ b.networks
                      OR cardinality(b.networks) >= %(hunt_networks_kept)s THEN b.networks
                    ELSE b.networks || excluded.networks END"""
_NETWORK = "array_remove(ARRAY[%(hunt_network)s::cidr], NULL)"
# An upload's postings, within its router's budget for the day: under it, its values are
# posted up to what the day has left, however the day's uploads are batched (a new one adds
# a row, one posted before that day updates its row; an update counts against what is left
# too, so the day never passes its budget: two uploads of a batch each read it under the
# budget, and each was let add a budget's worth, 41,992 postings against 22,000; the records
# of the values cut are counted as not indexed, at most the upload's); past it,
# nothing more of that day is indexed and the upload's records are counted as not indexed
# (a fresh router's upload adds at most %(hunt_allowance)s, its network's share, or NULL)
# (no lookup a value: a flooding router's later uploads cost the index a counter). New rows
# are told from updated ones by their records: an updated row holds more than this upload's
# (a partitioned table has no xmax to return).
_ADD_POSTINGS = f"""WITH v (kind, value, records) AS (VALUES {{values}}),
used AS (SELECT coalesce(sum(postings), 0) AS n FROM hunt_budgets
         WHERE mac = %(mac)s AND day = %(hunt_day)s),
added AS (
    INSERT INTO hunt_postings AS h (day, kind, value, mac, first_seen, last_seen, records)
    SELECT %(hunt_day)s, v.kind::"char", v.value, %(mac)s, %(hunt_seen)s, %(hunt_seen)s,
           v.records::integer
    FROM v, used WHERE used.n < %(hunt_budget)s
    LIMIT (SELECT least(greatest(%(hunt_budget)s - n, 0), %(hunt_allowance)s::bigint) FROM used)
    ON CONFLICT (kind, value, day, mac) DO UPDATE SET
        first_seen = least(h.first_seen, excluded.first_seen),
        last_seen = greatest(h.last_seen, excluded.last_seen),
        records = least(h.records::bigint + excluded.records, {INTEGER_MAX})
    RETURNING h.kind, h.value, h.records)
INSERT INTO hunt_budgets AS b (mac, day, postings, unindexed, networks)
SELECT %(mac)s, %(hunt_day)s,
       (SELECT count(*) FROM added a JOIN v ON a.kind = v.kind::"char"
            AND a.value = v.value COLLATE "C" WHERE a.records = v.records::integer),
       CASE WHEN (SELECT n FROM used) >= %(hunt_budget)s THEN %(hunt_records)s
            ELSE least(%(hunt_records)s, %(hunt_dropped)s + (
                SELECT coalesce(sum(v.records), 0) FROM v WHERE NOT EXISTS (
                    SELECT 1 FROM added a WHERE a.kind = v.kind::"char"
                    AND a.value = v.value COLLATE "C"))) END,
       {_NETWORK}
{_COUNT_ROUTER_DAY}"""
# An upload whose router's day had no budget left when the indexer read it: only counted.
_UNINDEXED = f"""INSERT INTO hunt_budgets AS b (mac, day, postings, unindexed, networks)
VALUES (%(mac)s, %(hunt_day)s, 0, %(hunt_dropped)s, {_NETWORK})
{_COUNT_ROUTER_DAY}"""


# --- What the index gained since a moment (server/hunt/recent.py) ---

# The values posted (or posted again) from %(since)s on, over the days from %(first_day)s:
# a posting's last_seen is the written_at of the last upload carrying it.
POSTED_SINCE = """SELECT DISTINCT kind::text, value FROM hunt_postings
WHERE day >= %(first_day)s AND last_seen >= %(since)s"""
# The moment from which the uploads not indexed yet were written (now when none is).
PENDING_FROM = "SELECT least(clock_timestamp(), min(written_at)) FROM hunt_pending"


# --- Uploads not indexed yet (migration 0032, server/hunt/indexer.py) ---

# Written with the upload's last statements, in its transaction. Two uploads of one router
# received in the same microsecond share their chunks' key, and one row names both: its
# triples are then dropped, and the indexer reads the chunks of both.
ADD_PENDING = f"""INSERT INTO hunt_pending AS p (mac, kind, received_at, records, network,
                                             triples)
VALUES (%(mac)s, %(kind)s, %(upload_received_at)s, %(pending_records)s, %(pending_network)s,
        %(pending_triples)s)
ON CONFLICT (mac, kind, received_at) DO UPDATE
SET records = least(p.records::bigint + excluded.records, {INTEGER_MAX}), triples = NULL"""
# An upload the indexer has not read yet, for chunk `c` of router %(mac)s: compaction leaves
# its chunks as written (server/telemetry/compaction.py), for the indexer finds them by their
# received_at.
UNREAD_UPLOAD = """EXISTS (SELECT 1 FROM hunt_pending p WHERE p.mac = %(mac)s
                      AND p.kind = c.kind AND p.received_at = c.received_at)"""
PENDING_NOW = "SELECT clock_timestamp(), EXISTS (SELECT 1 FROM hunt_pending)"
# A lane's: its routers are those whose MAC hashes to it (HUNT_INDEX_LANES).
PENDING = """SELECT mac::text, kind, received_at, records FROM hunt_pending
WHERE written_at <= %(until)s AND (hashtext(mac::text) & 2147483647) %% %(lanes)s = %(lane)s
ORDER BY written_at LIMIT %(limit)s"""
# One upload's: taken first in the indexer's transaction, so that what another took (or a
# router's removal deleted) meanwhile is posted by nobody twice, and by nobody after it.
# Single-shard under Citus; a batch's are pipelined (executemany).
TAKE_PENDING = """DELETE FROM hunt_pending
WHERE mac = %(mac)s AND kind = %(kind)s AND received_at = %(received_at)s
RETURNING mac::text, kind, received_at, written_at, network::text, records, triples"""
# A batch's chunks, upload after upload (the received_at range prunes the partitions).
UPLOADS_CHUNKS = """SELECT mac::text, kind, received_at, body FROM telemetry_chunks
WHERE received_at BETWEEN %(first)s AND %(last)s
  AND (mac, kind, received_at) IN (SELECT * FROM unnest(
      %(macs)s::macaddr[], %(kinds)s::text[], %(received)s::timestamptz[]))
ORDER BY mac, kind, received_at, id"""
ROUTER_DAY_NETWORKS = """SELECT mac::text, day, networks::text[] FROM hunt_budgets
WHERE (mac, day) IN (SELECT * FROM unnest(%(macs)s::macaddr[], %(days)s::timestamptz[]))"""
DAYS_USED = """SELECT mac::text, day, sum(postings) FROM hunt_budgets
WHERE (mac, day) IN (SELECT * FROM unnest(%(macs)s::macaddr[], %(days)s::timestamptz[]))
GROUP BY mac, day"""


def fresh_statement(keyed: bool) -> str:
    """Which of %(macs)s do not count for the fleet (server/hunt/budget.py): they share
    their network's budget."""
    return f"""SELECT r.mac::text FROM routers r
WHERE r.mac = ANY(%(macs)s::macaddr[]) AND NOT ({counted(keyed)})"""


# The networks' days that fresh routers of a batch upload from, their rows made and locked
# (in the order given, sorted: two lanes wait for each other, never deadlock), with the
# postings those routers added so far: a network's budget is then read and charged by one
# lane at a time.
LOCK_NETWORK_DAYS = """INSERT INTO hunt_network_budgets AS n (network, day)
SELECT * FROM unnest(%(networks)s::cidr[], %(days)s::timestamptz[])
ON CONFLICT (network, day) DO UPDATE SET postings = n.postings
RETURNING network::text, day, postings"""
CHARGE_NETWORK_DAYS = f"""UPDATE hunt_network_budgets n
SET postings = least(n.postings::bigint + c.added, {INTEGER_MAX})
FROM unnest(%(networks)s::cidr[], %(days)s::timestamptz[], %(added)s::bigint[])
    AS c (network, day, added)
WHERE n.network = c.network AND n.day = c.day"""


def postings_statement(params: dict) -> RowsInsert:
    """The statement adding an upload's postings (Postings.params, with the router's `mac`
    and its `budget`, HUNT_POSTINGS_PER_ROUTER_DAY; `dropped`: records carrying a value the
    tally already left out, counted as not indexed): one statement, single-shard under
    Citus."""
    return RowsInsert(_ADD_POSTINGS, _POSTING_ROW,
                      [tuple(row[name] for name in _POSTING_FIELDS) for row in params["rows"]],
                      _shared(params))


def unindexed_statement(params: dict) -> tuple[str, dict]:
    """The statement counting an upload none of whose values was tallied (its router's day
    had no budget left), the same `params` without rows, and its parameters."""
    return _UNINDEXED, _shared(params)


def _shared(params: dict) -> dict:
    return {"mac": params["mac"], "hunt_day": params["day"], "hunt_seen": params["seen"],
            "hunt_budget": params["budget"], "hunt_records": params["records"],
            "hunt_dropped": params.get("dropped", 0),
            "hunt_allowance": params.get("allowance"),
            "hunt_network": params.get("network"), "hunt_networks_kept": NETWORKS_KEPT}


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


# Whether a user hunted an indicator lately (the console's drill-downs follow a hunt): the
# newest entries of the log, by its index on asked_at.
HUNTED_LATELY = """SELECT EXISTS (
    SELECT 1 FROM hunt_log
    WHERE asked_at > now() - make_interval(secs => %(seconds)s) AND asked_by = %(who)s
      AND router IS NULL AND indicators @> %(indicator)s::jsonb)"""


async def hunted_lately(db: Database, who: str, kind: str, value: str, seconds: int) -> bool:
    row = await db.fetchone(HUNTED_LATELY, {
        "who": who, "seconds": seconds,
        "indicator": json.dumps([{"kind": kind, "value": value}])})
    return bool(row and row[0])


async def hunts(db: Database, limit: int, skip: int = 0) -> list[tuple]:
    return await db.fetchall(HUNTS, (limit, skip))


# The days a router's postings still in rows name any of some values (the console's
# drill-down reads its chunks for those days only; the packed days: server/hunt/sightings.py).
ROUTER_DAYS = """SELECT DISTINCT day FROM hunt_postings
WHERE mac = %(mac)s AND day >= %(since)s
  AND (kind, value) IN (SELECT * FROM unnest(%(codes)s::"char"[], %(values)s::text[]))
ORDER BY day"""


async def router_days(db, mac: str, asked: list[tuple[str, str]],
                      since: datetime) -> list[datetime]:
    rows = await db.fetchall(ROUTER_DAYS, {"mac": mac, "since": since,
                                           "codes": [c for c, _ in asked],
                                           "values": [v for _, v in asked]})
    return [row[0] for row in rows]


# --- The packed index (migration 0030, server/hunt/packing.py) ---

# Held by the packing job over each day's transaction and by a router's removal: a removal
# never runs beside a day's packing, which would number the router again unseen.
PACKING_DAY_LOCK = 7_302_145_060
AFTER_PACKING = "SELECT pg_advisory_xact_lock(%s)" % PACKING_DAY_LOCK

# A router removed: its postings gone, its number forgotten (the packed blocks keep the
# number, which then names no router) and listed so that every hunt leaves it out.
FORGET_HUNT_ROUTER = """WITH gone AS (DELETE FROM hunt_routers WHERE mac = %(mac)s RETURNING id)
INSERT INTO hunt_removed_routers (id) SELECT id FROM gone ON CONFLICT DO NOTHING;
DELETE FROM hunt_pending WHERE mac = %(mac)s;
DELETE FROM hunt_postings WHERE mac = %(mac)s"""

# The value's hash that places it in a block: PostgreSQL's own, so that the packing job's
# sort and a hunt's lookup agree (hashtextextended is what hash partitioning stores by, and
# stays the same across releases), seeded with the installation's secret (migration 0030):
# the hash is not cryptographic, and a router knowing its seed could craft a name of the
# same hash as an indicator and be found for it.
_SEED = "(SELECT seed FROM hunt_hash_seed)"
VALUE_HASH = "hashtextextended(kind::text || value, %(seed)s)"  # a parameter: under Citus
# the rows are on the workers, the seed on the coordinator
SEED = "SELECT seed FROM hunt_hash_seed"
HASHES = f"""SELECT hashtextextended(c || v, {_SEED})
FROM unnest(%(codes)s::text[], %(values)s::text[]) WITH ORDINALITY AS a(c, v, n) ORDER BY n"""

# Days before %(before)s with postings still in rows, oldest first.
DAYS_TO_PACK = """SELECT DISTINCT day FROM hunt_postings WHERE day < %(before)s ORDER BY day"""
DAY_POSTINGS = "SELECT count(*) FROM hunt_postings WHERE day = %(day)s"
PACKED_DAY = "SELECT bits FROM hunt_packed_days WHERE day = %(day)s"
# Routers numbered without gaps: no ON CONFLICT, which would take a number for every
# router already numbered (packing runs alone, under PACKING_LOCK).
# Only registered routers' postings are packed (and hunted in rows): those of an upload
# that ended after its router was removed are dropped with the day's rows.
_REGISTERED = "EXISTS (SELECT 1 FROM routers r WHERE r.mac = {table}.mac)"
# The day's routers gathered first (under Citus from the shards, as a result of its own):
# the coordinator's `hunt_routers` cannot be joined with the shards' rows directly.
NUMBER_ROUTERS = f"""WITH day_routers AS MATERIALIZED (
    SELECT DISTINCT p.mac FROM hunt_postings p
    WHERE p.day = %(day)s AND {_REGISTERED.format(table="p")})
INSERT INTO hunt_routers (mac)
SELECT d.mac FROM day_routers d
WHERE NOT EXISTS (SELECT 1 FROM hunt_routers r WHERE r.mac = d.mac)
ORDER BY d.mac"""
DAY_ROUTERS = """SELECT mac::text, id FROM hunt_routers
WHERE mac IN (SELECT DISTINCT mac FROM hunt_postings WHERE day = %(day)s)"""
# Times in whole seconds from the day's start, cut down (as a hunt prints them).
DAY_ROWS = f"""SELECT {VALUE_HASH}, mac::text, records, first, last - first
FROM (SELECT kind, value, mac, records,
             floor(extract(epoch FROM first_seen - day))::integer AS first,
             floor(extract(epoch FROM last_seen - day))::integer AS last
      FROM hunt_postings h WHERE day = %(day)s AND {_REGISTERED.format(table="h")}) p
ORDER BY 1"""
NEXT_PASS = "SELECT coalesce(max(pass) + 1, 0) FROM hunt_packed WHERE day = %(day)s"
ADD_BLOCK = """INSERT INTO hunt_packed (day, bucket, pass, postings, block)
VALUES (%(day)s, %(bucket)s, %(pass)s, %(postings)s, %(block)s)"""
PACKED = """INSERT INTO hunt_packed_days AS d (day, bits, postings, bytes)
VALUES (%(day)s, %(bits)s, %(postings)s, %(bytes)s)
ON CONFLICT (day) DO UPDATE SET postings = d.postings + excluded.postings,
    bytes = d.bytes + excluded.bytes, packed_at = now()"""
OLD_BUDGETS = "DELETE FROM hunt_budgets WHERE day < %(before)s"
OLD_NETWORK_BUDGETS = "DELETE FROM hunt_network_budgets WHERE day < %(before)s"
PARTITION_BYTES = "SELECT pg_total_relation_size(%(name)s::regclass)"
UNPACKED_ROWS_GONE = "DELETE FROM hunt_postings WHERE day = %(day)s"

# Reads of a hunt.
PACKED_DAYS = """SELECT day, bits FROM hunt_packed_days
WHERE day >= %(since)s AND day <= %(until)s ORDER BY day"""
BLOCKS = """SELECT day, bucket, block FROM hunt_packed
WHERE (day, bucket) IN (SELECT * FROM unnest(%(days)s::timestamptz[], %(buckets)s::integer[]))
ORDER BY day"""
FIRST_PACKED_DAY = "SELECT min(day) FROM hunt_packed_days"
REMOVED_ROUTERS = "SELECT id FROM hunt_removed_routers"
ROUTER_MACS = "SELECT id, mac::text FROM hunt_routers WHERE id = ANY(%(ids)s::integer[])"
ROUTER_IDS = "SELECT mac::text, id FROM hunt_routers WHERE mac = ANY(%(macs)s::macaddr[])"
# Each indicator's postings still in rows: how many routers, and the earliest %(reads)s of
# them by when they were first seen (an order no router can choose but by being first).
# Each value's earliest `reads` postings, ranked on the coordinator under Citus (a LATERAL
# subquery with a LIMIT, the form before, cannot be pushed down to the shards).
UNPACKED = f"""SELECT n, mac::text, day, first_seen, last_seen, records FROM (
    SELECT a.n, h.mac, h.day, h.first_seen, h.last_seen, h.records,
           row_number() OVER (PARTITION BY a.n ORDER BY h.first_seen, h.mac) AS rank
    FROM unnest(%(codes)s::"char"[], %(values)s::text[]) WITH ORDINALITY AS a(code, value, n)
    JOIN hunt_postings h ON h.kind = a.code AND h.value = a.value
    WHERE h.day >= %(since)s AND h.day <= %(until)s
      AND {_REGISTERED.format(table="h")}) ranked
WHERE rank <= %(reads)s"""
UNPACKED_OF_ROUTERS = """SELECT %(n)s, mac::text, day, first_seen, last_seen, records
FROM hunt_postings WHERE kind = %(code)s AND value = %(value)s AND day >= %(since)s
  AND day <= %(until)s AND mac = ANY(%(macs)s::macaddr[])"""
UNPACKED_COUNTS = f"""SELECT a.n, count(DISTINCT h.mac)
FROM unnest(%(codes)s::"char"[], %(values)s::text[]) WITH ORDINALITY AS a(code, value, n)
JOIN hunt_postings h ON h.kind = a.code AND h.value = a.value
WHERE h.day >= %(since)s AND h.day <= %(until)s AND {_REGISTERED.format(table="h")}
GROUP BY a.n"""


# Retention (server/jobs/retention.py) of the packed index's days (server/hunt/packing.py):
# a few thousand blocks a day.
EXPIRED_PACKED_DAYS = """DELETE FROM hunt_packed_days WHERE day < %(cutoff)s;
DELETE FROM hunt_packed WHERE day < %(cutoff)s"""  # the row count: the blocks
