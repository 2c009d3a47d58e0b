"""The fleet's attackers and outbreaks in the database: what the `fleet` job counts over every
router's hourly alert summaries (`telemetry_alerts`), the tables it replaces
(`fleet_attackers`, `fleet_outbreaks`, migration 0024) and what reads them.

The counting stays in the database: the window's alerts of blocking severity are read once
into a temporary table, each joined to its router when that router may report (a poll
address known, registered at least `min_age` ago, keyed when `keyed`) with its reporter
network (the /24 or /48 of that address); then one statement per list groups them by
address and by signature, and only the keys seen from at least `min_networks` networks come
back, with their evidence. Under Citus the join runs on every shard (the tables are
co-located by `mac`) and its rows are gathered on the coordinator, where the grouping runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

from engine.firewall import Exemptions
from engine.fleet import NOT_GLOBAL
from server.db.generation import HOURS_IN_WINDOW
from server.db.pool import Database, execute

CHANNEL = "fleet_list"  # notified when the lists (or the fleet's allowlist) change
FLEET_CHANGED = f"SELECT pg_notify('{CHANNEL}', '')"
REPORTERS_KEPT = 50     # per entry, most alerts first: what operators see of who reported
# The job's hash aggregates over a large fleet's window in memory rather than in temporary
# files (one connection, every few minutes; ops/bench/fleet_job.py measures both).
WORK_MEM = "256MB"


@dataclass(frozen=True)
class Counting:
    window: timedelta
    severity: int          # alerts of this severity or more severe count
    min_networks: int
    min_age: timedelta
    keyed: bool            # only routers with a key count (ROUTER_AUTH=key)
    max_addresses: int     # the most widely reported first
    max_signatures: int
    exempt: tuple[str, ...] = ()  # networks never listed (the allowlist, the service's own)

    def params(self) -> dict:
        return {"window": self.window, "severity": self.severity, "min": self.min_networks,
                "min_age": self.min_age, "not_global": list(NOT_GLOBAL),
                "kept": REPORTERS_KEPT, "exempt": list(self.exempt)}


_ISO = "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'"


def _hour(column: str) -> str:
    return f"to_char({column} AT TIME ZONE 'UTC', {_ISO})"


def _reporters(keyed: bool) -> str:
    key = " AND EXISTS (SELECT 1 FROM router_keys k WHERE k.mac = r.mac)" if keyed else ""
    return f"""SELECT r.mac, network(set_masklen(r.poll_address,
                                    CASE family(r.poll_address) WHEN 4 THEN 24 ELSE 48 END))
                AS network
  FROM routers r
  WHERE r.poll_address IS NOT NULL AND r.registered_at <= now() - %(min_age)s{key}"""


_EXTERNAL = "{0} IS NOT NULL AND NOT {0} <<= ANY(%(not_global)s::inet[])"
# The external endpoint of an alert as engine/firewall.py blocks it: the source when it is
# external, else the destination (NULL: an alert between two local addresses).
_ENDPOINT = (f"CASE WHEN {_EXTERNAL.format('a.src_ip')} THEN a.src_ip "
             f"WHEN {_EXTERNAL.format('a.dest_ip')} THEN a.dest_ip END")


def seen_statement(keyed: bool) -> str:
    """The window's alerts of blocking severity from the routers that may report, each with
    its endpoint and its reporter's network: read once, counted twice (by address, by
    signature)."""
    return f"""CREATE TEMPORARY TABLE fleet_seen ON COMMIT DROP AS
SELECT {_ENDPOINT} AS address, a.mac, r.network, a.signature_id AS sid, a.severity, a.alerts,
       a.hour
FROM telemetry_alerts a JOIN ({_reporters(keyed)}) r USING (mac)
WHERE {HOURS_IN_WINDOW} AND a.severity <= %(severity)s"""


def counted_statement(key: str) -> str:
    """From fleet_seen: the keys (`address` or `sid`) seen from at least %(min)s networks,
    at most %(limit)s of them (the most networks first; addresses in %(exempt)s left out
    first), each with its evidence. Every step a hash aggregate but the reporters' ranking,
    which sorts only the listed keys' routers."""
    source = ("fleet_seen WHERE address IS NOT NULL AND NOT address <<= ANY(%(exempt)s::inet[])"
              if key == "address" else "fleet_seen")
    shown = "host(r.address)" if key == "address" else "r.sid"
    sids, with_sids = "NULL::bigint[]", ""
    if key == "address":
        sids = "s.sids"
        with_sids = """
JOIN (SELECT address, array_agg(sid ORDER BY n DESC, sid) AS sids
      FROM (SELECT address, sid, sum(alerts) AS n FROM seen JOIN listed USING (address)
            GROUP BY address, sid) per_sid
      GROUP BY address) s USING (address)"""
    return f"""WITH
 seen AS (SELECT * FROM {source}),
 listed AS (SELECT {key}, count(*) AS networks
            FROM (SELECT {key}, network FROM seen GROUP BY {key}, network) pairs
            GROUP BY {key} HAVING count(*) >= %(min)s
            ORDER BY networks DESC, {key} LIMIT %(limit)s),
 per_router AS (SELECT {key}, mac, network, sum(alerts) AS n, min(severity) AS severity,
                       min(hour) AS first, max(hour) AS last
                FROM seen JOIN listed USING ({key}) GROUP BY {key}, mac, network),
 ranked AS (SELECT *, row_number() OVER (PARTITION BY {key} ORDER BY n DESC, mac) AS rank
            FROM per_router)
SELECT {shown}, r.routers, l.networks, r.alerts, r.severity, {sids},
       {_hour('r.first')}, {_hour('r.last')}, r.reporters
FROM (SELECT {key}, count(*) AS routers, sum(n)::bigint AS alerts,
             coalesce(min(severity), 255) AS severity, min(first) AS first,
             max(last) AS last,
             jsonb_agg(jsonb_build_array(mac::text, network::text, n) ORDER BY rank)
                 FILTER (WHERE rank <= %(kept)s) AS reporters
      FROM ranked GROUP BY {key}) r
JOIN listed l USING ({key}){with_sids}"""


_FIELDS = ("routers", "networks", "alerts", "severity", "signatures", "first_seen",
           "last_seen", "reporters")


async def count(db: Database, counting: Counting) -> tuple[list[dict], list[dict]]:
    """(the addresses, the signatures) seen from enough networks, with their evidence: one
    read of the window's alerts, in one transaction."""
    params = counting.params()
    async with db.transaction() as cur:
        await execute(cur, f"SET LOCAL work_mem = '{WORK_MEM}'")
        await execute(cur, seen_statement(counting.keyed), params)
        await execute(cur, "ANALYZE fleet_seen")  # a temporary table has no statistics
        await execute(cur, counted_statement("address"),
                      {**params, "limit": counting.max_addresses})
        addresses = await cur.fetchall()
        await execute(cur, counted_statement("sid"), {**params, "limit": counting.max_signatures})
        signatures = await cur.fetchall()
    return [_attacker(row) for row in addresses], [_outbreak(row) for row in signatures]


def _attacker(row: tuple) -> dict:
    """A row of _FIELDS after the address (and the expiry, when stored) as an entry."""
    entry = {"address": row[0], **dict(zip(_FIELDS, row[1:9]))}
    if len(row) > 9:
        entry["expires_at"] = row[9]
    return entry


def _outbreak(row: tuple) -> dict:
    """A row of _FIELDS after the sid (its signatures column empty) as an entry."""
    entry = {"sid": row[0], **dict(zip(_FIELDS, row[1:9]))}
    del entry["signatures"]
    return entry


async def polled_from(db: Database, addresses: list[str]) -> list[str]:
    """Which of `addresses` a router of the fleet polls from."""
    rows = await db.fetchall("SELECT DISTINCT host(poll_address) FROM routers "
                             "WHERE poll_address = ANY(%s::inet[])", (addresses,))
    return [row[0] for row in rows]


async def fleet_allowlist(db: Database) -> list[str]:
    return [row[0] for row in await db.fetchall(
        "SELECT network::text FROM firewall_allowlist WHERE mac IS NULL")]


async def own_allowlists(db: Database) -> dict[str, list[str]]:
    """Each router's own allowlist networks, for the routers that have any."""
    rows = await db.fetchall("SELECT mac::text, array_agg(network::text ORDER BY network) "
                             "FROM firewall_allowlist WHERE mac IS NOT NULL GROUP BY mac")
    return {mac: networks for mac, networks in rows}


# Each list written in one statement from one JSON document: a round trip per list, not per
# entry (10,000 entries).
_INSERT_ATTACKERS = """INSERT INTO fleet_attackers
SELECT address, routers, networks, alerts, severity, signatures, first_seen, last_seen,
       expires_at, reporters
FROM jsonb_to_recordset(%s::jsonb) AS x(address inet, routers integer, networks integer,
    alerts bigint, severity smallint, signatures bigint[], first_seen timestamptz,
    last_seen timestamptz, expires_at timestamptz, reporters jsonb)"""
_INSERT_OUTBREAKS = """INSERT INTO fleet_outbreaks
SELECT sid, severity, routers, networks, alerts, first_seen, last_seen, reporters
FROM jsonb_to_recordset(%s::jsonb) AS x(sid bigint, severity smallint, routers integer,
    networks integer, alerts bigint, first_seen timestamptz, last_seen timestamptz,
    reporters jsonb)"""


async def replace(db: Database, attackers: list[dict], outbreaks: list[dict]) -> None:
    """Both lists replaced in one transaction, every server process notified at its commit."""
    async with db.transaction() as cur:
        await execute(cur, "DELETE FROM fleet_attackers")
        await execute(cur, "DELETE FROM fleet_outbreaks")
        await execute(cur, _INSERT_ATTACKERS, (json.dumps(attackers),))
        await execute(cur, _INSERT_OUTBREAKS, (json.dumps(outbreaks),))
        await execute(cur, FLEET_CHANGED)


_ATTACKERS = f"""SELECT host(address), routers, networks, alerts, severity, signatures,
    {_hour('first_seen')}, {_hour('last_seen')}, reporters, {_hour('expires_at')}
FROM fleet_attackers ORDER BY networks DESC, routers DESC, address"""
_OUTBREAKS = f"""SELECT sid, routers, networks, alerts, severity, NULL,
    {_hour('first_seen')}, {_hour('last_seen')}, reporters
FROM fleet_outbreaks ORDER BY networks DESC, routers DESC, sid"""


async def attackers(db: Database) -> list[dict]:
    """The fleet's attackers as the job stored them, most widely reported first."""
    return [_attacker(row) for row in await db.fetchall(_ATTACKERS)]


async def for_router(db: Database, mac: str) -> list[dict]:
    """The fleet's attackers this router gets (the allowlist's, fleet-wide and its own, out),
    with the operators' evidence."""
    allowlist = [row[0] for row in await db.fetchall(
        "SELECT network::text FROM firewall_allowlist WHERE mac IS NULL OR mac = %s", (mac,))]
    exempt = Exemptions.of(allowlist, []).exempt
    return [entry for entry in await attackers(db) if not exempt(entry["address"])]


async def outbreaks(db: Database) -> list[dict]:
    return [_outbreak(row) for row in await db.fetchall(_OUTBREAKS)]
