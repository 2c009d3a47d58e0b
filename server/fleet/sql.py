"""The fleet's attackers and outbreaks in the database: what the `fleet` job counts over every
router's hourly alert summaries (`telemetry_alerts`), the tables it replaces
(`fleet_attackers`, `fleet_outbreaks`, migration 0024) and what reads them.

The counting stays in the database, every rail before any limit:
- the window's alerts of blocking severity are read once into a temporary table, from the
  routers that may report: registered, and holding their current key, at least `min_age`
  ago (the later of the two counts, so a reset or a new enrollment starts again), keyed
  when `keyed`. Each alert counts for the network its upload came from (`network`, written
  with the summary at ingestion, migration 0026), never for where the router polls from;
- a router with more than `per_router` summary rows in the window gives only its most
  alerted `per_router` (so at most that many addresses and signatures; the rest are counted
  in the job's result, not listed), found by an index-only count before any row's work;
- each router's pairs (address or signature, router) are summed, each router giving one
  network per key; an address counts only when it is public
  (engine/addresses.py's table, in SQL), on no allowlist and no router's poll address;
- a key's networks are its distinct reporter networks, at most `per_allocation` of them
  per IPv6 /32, and only keys of at least `min_networks` come back, the most first, with
  their evidence.
Under Citus the first read runs on every shard (the tables are co-located by `mac`) and its
rows are gathered on the coordinator, where the rest runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

from engine.addresses import ALLOCATION_PREFIX, NOT_PUBLIC, PER_ALLOCATION
from server.db.channels import FLEET_CHANGED
from server.db.pool import Database, execute
from server.routers.sql import counted as counted_router
from server.telemetry.sql import HOURS_IN_WINDOW

REPORTERS_KEPT = 50     # per entry, most alerts first: what operators see of who reported
# The job's hash aggregates over a large fleet's window in memory rather than in temporary
# files (one connection, every few minutes; bench/fleet_job.py measures both).
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
    per_router: int        # keys (addresses, signatures) one router counts for, per window
    exempt: tuple[str, ...] = ()  # networks never listed (the allowlist, the service's own)

    def params(self) -> dict:
        return {"window": self.window, "severity": self.severity, "min": self.min_networks,
                "min_age": self.min_age, "not_public": list(NOT_PUBLIC),
                "kept": REPORTERS_KEPT, "exempt": list(self.exempt),
                "per_router": self.per_router, "per_allocation": PER_ALLOCATION}


def _reporters(keyed: bool) -> str:
    """The routers that may report: those that count for the fleet."""
    return f"SELECT r.mac FROM routers r WHERE {counted_router(keyed)}"


_PUBLIC = "{0} IS NOT NULL AND NOT {0} <<= ANY(%(not_public)s::inet[])"


def endpoint(otherwise: str = "NULL") -> str:
    """SQL: the external endpoint of the alert row `a` as engine/firewall.py blocks it: the
    source when it is public, else the destination when it is, else `otherwise` (NULL: an
    alert between two local addresses); %(not_public)s is NOT_PUBLIC."""
    return (f"CASE WHEN {_PUBLIC.format('a.src_ip')} THEN a.src_ip "
            f"WHEN {_PUBLIC.format('a.dest_ip')} THEN a.dest_ip ELSE {otherwise} END")


_ENDPOINT = endpoint()


_SEEN_FROM = f"""FROM telemetry_alerts a JOIN ({{reporters}}) r USING (mac)
WHERE {HOURS_IN_WINDOW} AND a.severity <= %(severity)s AND a.network IS NOT NULL"""


def over_bound_statement(keyed: bool) -> str:
    """The routers with more than %(per_router)s summary rows in the window, and by how many:
    an index-only count, before any row's work."""
    return f"""SELECT a.mac::text, count(*) - %(per_router)s
{_SEEN_FROM.format(reporters=_reporters(keyed))}
GROUP BY a.mac HAVING count(*) > %(per_router)s"""


def seen_statement(keyed: bool) -> str:
    """The window's alerts of blocking severity from the routers that may report, but those
    past the bound (%(over)s), each with its endpoint and the network its upload came from:
    read once, counted twice."""
    return f"""CREATE TEMPORARY TABLE fleet_seen ON COMMIT DROP AS
SELECT {_ENDPOINT} AS address, a.mac, a.network, a.signature_id AS sid, a.severity, a.alerts,
       a.hour
{_SEEN_FROM.format(reporters=_reporters(keyed))} AND a.mac <> ALL(%(over)s::macaddr[])"""


def bounded_seen_statement(keyed: bool) -> str:
    """A router past the bound: its %(per_router)s most alerted rows (so at most that many
    addresses and signatures), on its one shard under Citus."""
    return f"""INSERT INTO fleet_seen
SELECT {_ENDPOINT}, a.mac, a.network, a.signature_id, a.severity, a.alerts, a.hour
{_SEEN_FROM.format(reporters=_reporters(keyed))} AND a.mac = %(mac)s
ORDER BY a.alerts DESC, a.hour DESC LIMIT %(per_router)s"""


def _ipv4_at(column: str, offset: int, invert: bool = False) -> str:
    """The IPv4 address in four bytes of an IPv6 address (inet_send's form: four bytes of
    header, then the address), inverted for Teredo's client."""
    octets = [f"get_byte(inet_send({column}), {offset + n})" for n in range(4)]
    if invert:
        octets = [f"(255 - {octet})" for octet in octets]
    value = " | ".join(f"({octet}::bigint << {24 - 8 * n})" for n, octet in enumerate(octets))
    return f"('0.0.0.0'::inet + ({value}))"


def carried(column: str) -> str:
    """SQL of engine/addresses.carried on a canonical address: the IPv4 address a 6to4
    (2002::/16) or Teredo (2001::/32) address carries, else the address."""
    return (f"CASE WHEN {column} <<= '2002::/16' THEN {_ipv4_at(column, 6)} "
            f"WHEN {column} <<= '2001::/32' THEN {_ipv4_at(column, 16, invert=True)} "
            f"ELSE {column} END")


def poll_key(column: str) -> str:
    """What a poll address protects, and an alert's endpoint is looked up by: the IPv4
    address it carries (so an IPv4 poll address protects its 6to4 site and Teredo clients,
    and a 6to4 one the IPv4 address and its whole site), else its IPv6 /64."""
    return (f"CASE WHEN family({carried(column)}) = 4 THEN {carried(column)} "
            f"ELSE network(set_masklen({column}, 64))::inet END")


# The keys the current poll addresses protect, and those kept from earlier runs: a key that
# once kept an address off the list keeps it off for the window (POLLED_KEPT), so a router
# moving its poll address back and forth cannot make the list, and every router's copy of
# it, change at each run.
POLLED_STATEMENT = f"""CREATE TEMPORARY TABLE fleet_polled ON COMMIT DROP AS
SELECT {poll_key('poll_address')} AS key FROM routers WHERE poll_address IS NOT NULL
UNION SELECT key FROM fleet_polled_kept WHERE kept_until > now()"""
POLLED_KEPT = f"""INSERT INTO fleet_polled_kept (key, kept_until)
SELECT DISTINCT p.key, now() + %(window)s
FROM (SELECT DISTINCT address FROM fleet_seen WHERE address IS NOT NULL) s
JOIN fleet_polled p ON p.key = {poll_key('s.address')}
ON CONFLICT (key) DO UPDATE SET kept_until = excluded.kept_until"""
FORGET_POLLED = "DELETE FROM fleet_polled_kept WHERE kept_until <= now()"

# The rails, as engine/firewall.py's Exemptions judges them (the address as written and the
# IPv4 address it carries), so that nothing the Python check would drop takes a place
# before the limit.
_RAILS = {"address": f"""address IS NOT NULL AND NOT address <<= ANY(%(exempt)s::inet[])
      AND NOT {carried('address')} <<= ANY(%(exempt)s::inet[])
      AND NOT EXISTS (SELECT 1 FROM fleet_polled p WHERE p.key = {poll_key('s.address')})""",
          "sid": "true"}


def pairs_statement(key: str) -> str:
    """fleet_<key>s: per (key, router) what it reported and its one network (the lowest of
    those its uploads came from)."""
    return f"""CREATE TEMPORARY TABLE fleet_{key}s ON COMMIT DROP AS
SELECT {key}, mac, min(network) AS network, sum(alerts) AS n, min(severity) AS severity,
       min(hour) AS first, max(hour) AS last
FROM fleet_seen s WHERE {_RAILS[key]} GROUP BY {key}, mac"""


def _counted(key: str) -> str:
    """The fleet's counting rule, its one form: per key of `pairs` (one row per key and
    router, with the router's one network), its distinct networks, at most
    %(per_allocation)s of them per IPv6 /32. The job's lists and the explanation of them
    (server/fleet/explain.py) both count with it."""
    return f"""SELECT {key}, sum(least(networks, %(per_allocation)s))::integer AS networks
            FROM (SELECT {key}, count(DISTINCT network) AS networks FROM pairs
                  GROUP BY {key}, CASE WHEN family(network) = 6
                      THEN network(set_masklen(network, {ALLOCATION_PREFIX})) ELSE network END
                 ) per_allocation
            GROUP BY {key}"""


def _listed(key: str) -> str:
    """The WITH of both counts, from fleet_<key>s: the keys counted (`_counted`) from at
    least %(min)s networks, at most %(limit)s of them, the most networks first, and each
    one's reporters ranked by their alerts."""
    return f"""WITH
 pairs AS (SELECT * FROM fleet_{key}s),
 listed AS ({_counted(key)} HAVING sum(least(networks, %(per_allocation)s)) >= %(min)s
            ORDER BY networks DESC, {key} LIMIT %(limit)s),
 ranked AS (SELECT pairs.*, row_number() OVER (PARTITION BY {key} ORDER BY n DESC, mac)
                AS reporter_rank
            FROM pairs JOIN listed USING ({key}))"""


def _evidence(key: str) -> str:
    """Each listed key's routers, alerts, severity, first and last hours, and the first
    %(kept)s reporters (router, network, alerts)."""
    return f"""(SELECT {key}, count(*) AS routers, sum(n)::bigint AS alerts,
             coalesce(min(severity), 255) AS severity, min(first) AS first,
             max(last) AS last,
             jsonb_agg(jsonb_build_array(mac::text, network::text, n) ORDER BY reporter_rank)
                 FILTER (WHERE reporter_rank <= %(kept)s) AS reporters
      FROM ranked GROUP BY {key}) r"""


def counted_addresses_statement() -> str:
    """From fleet_addresss: the addresses seen from enough networks (`_listed`), each with
    its evidence and the signatures it alerted by (the most alerts first)."""
    return f"""{_listed('address')}
SELECT host(r.address), r.routers, l.networks, r.alerts, r.severity, s.sids,
       r.first, r.last, r.reporters
FROM {_evidence('address')}
JOIN listed l USING (address)
JOIN (SELECT address, array_agg(sid ORDER BY n DESC, sid) AS sids
      FROM (SELECT address, sid, sum(alerts) AS n FROM fleet_seen JOIN listed USING (address)
            GROUP BY address, sid) per_sid
      GROUP BY address) s USING (address)"""


def counted_signatures_statement() -> str:
    """From fleet_sids: the signatures seen from enough networks (`_listed`), each with its
    evidence (its signatures column NULL)."""
    return f"""{_listed('sid')}
SELECT r.sid, r.routers, l.networks, r.alerts, r.severity, NULL::bigint[],
       r.first, r.last, r.reporters
FROM {_evidence('sid')}
JOIN listed l USING (sid)"""


@dataclass
class Counted:
    """Each entry a dict of its key (address or sid) and _FIELDS, its times (first_seen,
    last_seen) datetimes."""
    attackers: list[dict]
    outbreaks: list[dict]
    over_bound: dict[str, int]  # router -> its summary rows past the bound: not counted


_FIELDS = ("routers", "networks", "alerts", "severity", "signatures", "first_seen",
           "last_seen", "reporters")


async def count(db: Database, counting: Counting, attackers: bool = True) -> Counted:
    """The addresses (unless `attackers` is False) and the signatures seen from enough
    networks, with their evidence: one read of the window's alerts, in one transaction."""
    params = counting.params()
    found = {}
    async with db.transaction() as cur:
        await execute(cur, f"SET LOCAL work_mem = '{WORK_MEM}'")
        await execute(cur, over_bound_statement(counting.keyed), params)
        over_bound = dict(await cur.fetchall())
        await execute(cur, seen_statement(counting.keyed), {**params, "over": list(over_bound)})
        for mac in over_bound:
            await execute(cur, bounded_seen_statement(counting.keyed), {**params, "mac": mac})
        await execute(cur, "ANALYZE fleet_seen")  # a temporary table has no statistics
        await execute(cur, FORGET_POLLED)
        await execute(cur, POLLED_STATEMENT)
        await execute(cur, POLLED_KEPT, params)
        lists = ((("address", counted_addresses_statement(), counting.max_addresses),)
                 if attackers else ())
        lists += (("sid", counted_signatures_statement(), counting.max_signatures),)
        for key, counted, limit in lists:
            await execute(cur, pairs_statement(key), params)
            await execute(cur, counted, {**params, "limit": limit})
            found[key] = await cur.fetchall()
    return Counted([_attacker(row) for row in found.get("address", [])],
                   [_outbreak(row) for row in found["sid"]], over_bound)


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


# Each list written in one statement from one JSON document: a round trip per list, not per
# entry (10,000 entries).
def listed_attacker(address: str) -> str:
    """SQL: whether the inet `address` is on the fleet's attackers list now."""
    return f"EXISTS (SELECT 1 FROM fleet_attackers f WHERE f.address = {address})"


ATTACKERS_LISTED = "SELECT count(*) FROM fleet_attackers"


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


# Those that matched on the routers' firewalls at the most networks first (fleet_matched,
# set by the enforcement reports' job), then the most widely reported.
_ATTACKERS = """SELECT host(a.address), a.routers, a.networks, a.alerts, a.severity,
    a.signatures, a.first_seen, a.last_seen, a.reporters, a.expires_at
FROM fleet_attackers a LEFT JOIN fleet_matched m USING (address)
ORDER BY coalesce(m.networks, 0) DESC, a.networks DESC, a.routers DESC,
         date_trunc('day', a.last_seen) DESC, a.address"""
_OUTBREAKS = """SELECT sid, routers, networks, alerts, severity, NULL,
    first_seen, last_seen, reporters
FROM fleet_outbreaks ORDER BY networks DESC, routers DESC, sid"""


async def set_matched(db: Database, rows: list[tuple[str, int]]) -> None:
    """How widely each address matched on the routers' firewalls (address, networks),
    replacing the last count (the enforcement reports' job sets it); the routers' lists are
    built again when it changed."""
    async with db.transaction() as cur:
        await execute(cur, "SELECT host(address), networks FROM fleet_matched")
        if sorted(tuple(row) for row in await cur.fetchall()) == sorted(rows):
            return  # the same: no list is built again
        await execute(cur, "DELETE FROM fleet_matched")
        await execute(cur, """INSERT INTO fleet_matched (address, networks)
            SELECT * FROM unnest(%(addresses)s::inet[], %(networks)s::int[])""",
                      {"addresses": [row[0] for row in rows],
                       "networks": [row[1] for row in rows]})
        await execute(cur, FLEET_CHANGED)


async def attackers(db: Database) -> list[dict]:
    """The fleet's attackers as the job stored them, those matched at the most networks on
    the routers' firewalls first (fleet_matched), then the most widely reported, then the
    most recently seen by the day (a router's smaller list keeps the first, and a day's
    order does not move with each hour reported: server/fleet/document.py); their times
    (first_seen, last_seen, expires_at) datetimes."""
    return [_attacker(row) for row in await db.fetchall(_ATTACKERS)]


async def outbreaks(db: Database) -> list[dict]:
    return [_outbreak(row) for row in await db.fetchall(_OUTBREAKS)]


def reports_statement(keyed: bool) -> str:
    """Every address reported in the window, with each reporting router, its network and
    whether it may count (old enough, keyed when `keyed`): what explains the list."""
    either = endpoint("a.src_ip")
    return f"""SELECT host(address), mac::text, network::text, bool_or(may_count)
FROM (SELECT {either} AS address, a.mac, a.network, r.mac IS NOT NULL AS may_count
      FROM telemetry_alerts a LEFT JOIN ({_reporters(keyed)}) r USING (mac)
      WHERE {HOURS_IN_WINDOW} AND a.severity <= %(severity)s
        AND coalesce(a.src_ip, a.dest_ip) IS NOT NULL
        AND (%(address)s::inet IS NULL OR {either} = %(address)s::inet)) reported
GROUP BY address, mac, network"""


async def reports(db: Database, counting: Counting, address: str | None = None
                  ) -> list[tuple[str, str, str | None, bool]]:
    """(address, router, its upload network or None, whether it may count) for every
    report of the window (of `address` alone when given)."""
    return await db.fetchall(reports_statement(counting.keyed),
                             {**counting.params(), "address": address})


async def polled_addresses(db: Database, addresses: list[str]) -> set[str]:
    """Which of `addresses` a poll address protects (as the job's rail judges: by the
    IPv4 address it carries, an IPv6 /64). Three plain statements, as Citus takes them: the
    addresses' keys, then the keys found among the routers' (distributed) and among those
    kept (a table of the coordinator)."""
    keyed = dict(await db.fetchall(f"SELECT host(a), text({poll_key('a')}) "
                                   "FROM unnest(%s::inet[]) AS a", (addresses,)))
    keys = sorted(set(keyed.values()))
    polled = await db.fetchall(f"""SELECT DISTINCT text({poll_key('poll_address')})
FROM routers WHERE poll_address IS NOT NULL
  AND text({poll_key('poll_address')}) = ANY(%s::text[])""", (keys,))
    kept = await db.fetchall("SELECT text(key) FROM fleet_polled_kept "
                             "WHERE kept_until > now() AND text(key) = ANY(%s::text[])", (keys,))
    found = {row[0] for row in polled + kept}
    return {address for address, key in keyed.items() if key in found}


# The fleet's outbreaks as the generation reads them with a router's tuning, in its one
# statement (server/generation/sql.py RENEW_AND_TUNING): (sid, networks, severity) by sid.
OUTBREAKS_FOR_GENERATION = """(SELECT json_agg(json_build_array(sid, networks, severity) ORDER BY sid)
  FROM fleet_outbreaks)"""


# The explanation's count of each reported address (server/fleet/explain.py): the reports
# that may count, one network a router (its lowest, as fleet_<key>s keeps), then `_counted`.
_REPORTS_COUNTED = f"""WITH pairs AS (
    SELECT address, mac, min(network) AS network
    FROM unnest(%(addresses)s::inet[], %(macs)s::macaddr[], %(networks)s::cidr[])
         AS t (address, mac, network)
    GROUP BY address, mac)
SELECT host(address), networks FROM ({_counted('address')}) counted"""


async def networks_counted(db: Database, reports: list[tuple[str, str, str]]) -> dict[str, int]:
    """(address, router, network) reports that may count -> each address's networks, as the
    job counts them."""
    if not reports:
        return {}
    addresses, macs, networks = (list(column) for column in zip(*reports))
    return dict(await db.fetchall(_REPORTS_COUNTED, {
        "addresses": addresses, "macs": macs, "networks": networks,
        "per_allocation": PER_ALLOCATION}))
