"""The enforcement reports' statements (tables `enforcement_days`, `enforcement_hits`,
migration 0044): a report stored, and the fleet's figures counted from them."""

from __future__ import annotations

from datetime import date

from engine.addresses import ALLOCATION_PREFIX, PER_ALLOCATION
from server.db.pool import execute
from server.fleet.sql import listed_attacker
from server.polling.versions import held_item
from server.routers.sql import counted

LOCK_CLASS = 7_302_151  # first key of the per-router advisory lock of its reports
LOCK_ROUTER = "SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(%(mac)s::text))"
TODAY = "SELECT (now() AT TIME ZONE 'UTC')::date"

# The block entry's text in the threat intelligence document's items (engine/intel.py
# `_entry_key`: its address, a space, its expiry): an address alone, a network as CIDR.
_ITEM = ("CASE WHEN masklen(g.entry) = CASE family(g.entry) WHEN 4 THEN 32 ELSE 128 END "
         "THEN host(g.entry) ELSE text(g.entry) END")

# Which of a report's (list, entry) pairs the router holds now: its own firewall payload's
# (%(own)s, its addresses), the fleet's list, a block entry of a current threat
# intelligence document (%(documents)s).
SENT = f"""SELECT g.list, text(g.entry)
FROM unnest(%(lists)s::text[], %(entries)s::cidr[]) AS g(list, entry)
WHERE (g.list = 'firewall' AND g.entry::inet = ANY(%(own)s::inet[]))
   OR (g.list = 'fleet' AND {listed_attacker("g.entry::inet")})
   OR (g.list = 'intel' AND {held_item("%(documents)s", "block", _ITEM)})"""

HELD = """SELECT list, text(entry) FROM enforcement_hits
WHERE mac = %(mac)s AND day = %(day)s"""

ADD_DAY = """INSERT INTO enforcement_days AS d (mac, day, list, network, packets, bytes, alerts)
VALUES (%(mac)s, %(day)s, %(list)s, %(network)s, %(packets)s, %(bytes)s, %(alerts)s)
ON CONFLICT (mac, day, list) DO UPDATE SET
    network = coalesce(excluded.network, d.network),
    packets = least(d.packets + excluded.packets, %(max_packets)s),
    bytes = least(d.bytes + excluded.bytes, %(max_bytes)s),
    alerts = least(d.alerts + excluded.alerts, %(max_alerts)s),
    reports = d.reports + 1"""

ADD_HITS = """INSERT INTO enforcement_hits AS h (mac, day, list, entry, packets, bytes)
SELECT %(mac)s, %(day)s, list, entry, packets, bytes
FROM unnest(%(lists)s::text[], %(entries)s::cidr[], %(packets)s::bigint[],
            %(bytes)s::bigint[]) AS g(list, entry, packets, bytes)
ON CONFLICT (mac, day, list, entry) DO UPDATE SET
    packets = least(h.packets + excluded.packets, %(max_packets)s),
    bytes = least(h.bytes + excluded.bytes, %(max_bytes)s)"""

FORGET_ROUTER = """WITH hits AS (DELETE FROM enforcement_hits WHERE mac = %(mac)s)
DELETE FROM enforcement_days WHERE mac = %(mac)s"""

EXPIRED = """WITH hits AS (DELETE FROM enforcement_hits WHERE day < %(before)s)
DELETE FROM enforcement_days WHERE day < %(before)s"""


async def today(cur) -> date:
    """The database's UTC day: every process and host counts reports by the same one."""
    await execute(cur, TODAY)
    row = await cur.fetchone()
    assert row is not None
    return row[0]


def counted_networks(source: str, key: str) -> str:
    """SQL: per `key` (columns of `source`, which also gives `network`), its distinct
    reporter networks, at most PER_ALLOCATION /48s of one IPv6 /32, as the fleet counts its
    reporters (server/fleet/sql.py): rows (key..., networks)."""
    return f"""SELECT {key}, count(*) AS networks FROM (
    SELECT {key}, row_number() OVER (
        PARTITION BY {key}, CASE WHEN family(network) = 6
                                 THEN set_masklen(network, {ALLOCATION_PREFIX}) ELSE network END
        ORDER BY network) AS place
    FROM (SELECT DISTINCT {key}, network FROM ({source}) s WHERE network IS NOT NULL) d) ranked
WHERE place <= {PER_ALLOCATION} GROUP BY {key}"""


def _window(keyed: bool) -> str:
    """The reports of the last %(days)s days (today included) of routers that count."""
    return f"""SELECT e.* FROM enforcement_days e JOIN routers r USING (mac)
WHERE e.day > %(today)s - %(days)s AND {counted(keyed)}"""


def _hits(keyed: bool) -> str:
    return f"""SELECT h.mac, h.list, h.entry, h.packets, h.bytes, d.network
FROM enforcement_hits h JOIN ({_window(keyed)}) d USING (mac, day, list)"""


def lists_statement(keyed: bool) -> str:
    """Per list: routers and networks that reported it, that it matched at, packets, bytes,
    alerts, entries matched."""
    window, hits = _window(keyed), _hits(keyed)
    return f"""WITH w AS ({window}),
loaded AS ({counted_networks("SELECT list, network FROM w", "list")}),
matched AS ({counted_networks("SELECT list, network FROM w WHERE packets > 0", "list")}),
entries AS (SELECT list, count(DISTINCT entry) AS n FROM ({hits}) h GROUP BY list)
SELECT w.list, count(DISTINCT w.mac), coalesce(max(l.networks), 0),
       count(DISTINCT w.mac) FILTER (WHERE w.packets > 0), coalesce(max(m.networks), 0),
       sum(w.packets), sum(w.bytes), sum(w.alerts), coalesce(max(e.n), 0)
FROM w LEFT JOIN loaded l USING (list) LEFT JOIN matched m USING (list)
       LEFT JOIN entries e USING (list)
GROUP BY w.list ORDER BY w.list"""


def entries_statement(keyed: bool) -> str:
    """The entries that matched most widely, per list: networks first, then packets."""
    hits = _hits(keyed)
    return f"""WITH h AS ({hits}),
nets AS ({counted_networks("SELECT list, entry, network FROM h", "list, entry")})
SELECT * FROM (
    SELECT h.list, text(h.entry), coalesce(max(n.networks), 0) AS networks,
           count(DISTINCT h.mac), sum(h.packets) AS packets, sum(h.bytes),
           row_number() OVER (PARTITION BY h.list
                              ORDER BY coalesce(max(n.networks), 0) DESC, sum(h.packets) DESC,
                                       h.entry) AS place
    FROM h LEFT JOIN nets n USING (list, entry)
    GROUP BY h.list, h.entry) ranked
WHERE place <= %(top)s ORDER BY list, place"""


def feeds_statement(keyed: bool) -> str:
    """Per threat feed: its current addresses and networks, those a matched block entry
    holds, the routers and networks they matched at, packets and bytes."""
    hits = _hits(keyed)
    return f"""WITH h AS ({hits} WHERE h.list = 'intel'),
entries AS (SELECT entry, count(DISTINCT mac) AS routers, sum(packets) AS packets,
                   sum(bytes) AS bytes FROM h GROUP BY entry),
credited AS (SELECT DISTINCT i.feed, i.kind, i.value, e.entry
             FROM entries e JOIN intel_indicators i
               ON i.kind IN ('ip', 'network') AND (i.value::inet) <<= e.entry
             WHERE i.expires_at > now()),
routers AS (SELECT c.feed, count(DISTINCT h.mac) AS n FROM credited c JOIN h USING (entry)
            GROUP BY c.feed),
nets AS ({counted_networks(
    "SELECT c.feed, h.network FROM credited c JOIN h USING (entry)", "feed")}),
dropped AS (SELECT feed, sum(packets) AS packets, sum(bytes) AS bytes
            FROM (SELECT DISTINCT c.feed, c.entry FROM credited c) f JOIN entries USING (entry)
            GROUP BY feed),
held AS (SELECT feed, count(*) AS n FROM intel_indicators
         WHERE kind IN ('ip', 'network') AND expires_at > now() GROUP BY feed)
SELECT f.name, coalesce(held.n, 0),
       (SELECT count(DISTINCT (c.kind, c.value)) FROM credited c WHERE c.feed = f.name),
       coalesce(routers.n, 0), coalesce(nets.networks, 0),
       coalesce(dropped.packets, 0), coalesce(dropped.bytes, 0)
FROM intel_feeds f LEFT JOIN held ON held.feed = f.name
     LEFT JOIN routers ON routers.feed = f.name LEFT JOIN nets ON nets.feed = f.name
     LEFT JOIN dropped ON dropped.feed = f.name
ORDER BY f.name"""


def matched_values_statement(keyed: bool) -> str:
    """Each threat feed's current address or network inside a matched intel block entry,
    with the networks it matched at: (kind, value, networks)."""
    hits = _hits(keyed)
    return f"""WITH h AS ({hits} WHERE h.list = 'intel'),
credited AS (SELECT DISTINCT i.kind, i.value, h.network
             FROM (SELECT DISTINCT entry, network FROM h) h JOIN intel_indicators i
               ON i.kind IN ('ip', 'network') AND (i.value::inet) <<= h.entry
             WHERE i.expires_at > now())
{counted_networks("SELECT kind, value, network FROM credited", "kind, value")}"""


# What `macs`' firewalls dropped in [start, end), per list: each UTC day counted in the
# period its midnight falls in (a period starting within a day leaves that day out: its
# earlier hours may be another owner's).
BLOCKED_BETWEEN = """SELECT mac::text, list, sum(packets), sum(bytes) FROM enforcement_days
WHERE mac = ANY(%(macs)s::macaddr[]) AND day >= (%(start)s AT TIME ZONE 'UTC')::date
  AND (day::timestamp AT TIME ZONE 'UTC') >= %(start)s
  AND (day::timestamp AT TIME ZONE 'UTC') < %(end)s
GROUP BY mac, list"""


# One router's reports, newest day first.
ROUTER_DAYS = """SELECT day, list, packets, bytes, alerts, reports FROM enforcement_days
WHERE mac = %(mac)s AND day > %(today)s - %(days)s ORDER BY day DESC, list"""
ROUTER_ENTRIES = """SELECT list, text(entry), sum(packets), sum(bytes) FROM enforcement_hits
WHERE mac = %(mac)s AND day > %(today)s - %(days)s
GROUP BY list, entry ORDER BY sum(packets) DESC, list, entry LIMIT %(top)s"""
