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

# The block entry's text in the threat intelligence document's items (engine/fleet.py
# `entry_key`: its address, a space, its expiry): an address alone, a network as CIDR.
_ITEM = ("CASE WHEN masklen(g.entry) = CASE family(g.entry) WHEN 4 THEN 32 ELSE 128 END "
         "THEN host(g.entry) ELSE text(g.entry) END")

# Which of a report's (list, entry) pairs the router holds now: its own firewall payload's
# (%(own)s, its addresses), the fleet's list, a block entry of a current threat
# intelligence document (%(documents)s); of the two shared ones, none its own allowlist
# covers (its copies leave those out).
SENT = f"""SELECT g.list, text(g.entry)
FROM unnest(%(lists)s::text[], %(entries)s::cidr[]) AS g(list, entry)
WHERE ((g.list = 'firewall' AND g.entry::inet = ANY(%(own)s::inet[]))
   OR (g.list = 'fleet' AND {listed_attacker("g.entry::inet")})
   OR (g.list = 'intel' AND {held_item("%(documents)s", "block", _ITEM)}))
  AND NOT (g.list <> 'firewall' AND EXISTS (
      SELECT 1 FROM firewall_allowlist a WHERE a.mac = %(mac)s AND a.network && g.entry))"""

HELD = """SELECT list, text(entry) FROM enforcement_hits
WHERE mac = %(mac)s AND day = %(day)s"""

# Every list of a report in one statement.
ADD_DAYS = """INSERT INTO enforcement_days AS d (mac, day, list, network, packets, bytes, alerts)
SELECT %(mac)s, %(day)s, list, %(network)s, packets, bytes, alerts
FROM unnest(%(lists)s::text[], %(packets)s::bigint[], %(bytes)s::bigint[],
            %(alerts)s::bigint[]) AS g(list, packets, bytes, alerts)
ON CONFLICT (mac, day, list) DO UPDATE SET
    network = coalesce(d.network, excluded.network),  -- the day's first report's
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
    """SQL: per `key` (columns of `source`, which also gives `mac`, `day` and `network`), the
    reporter networks of its routers, each router for one network (that of its first day
    in the window: a router reporting from another network each day is still one), at most
    PER_ALLOCATION /48s of one IPv6 /32, as the fleet counts its reporters
    (server/fleet/sql.py): rows (key..., networks)."""
    return f"""SELECT {key}, count(*) AS networks FROM (
    SELECT {key}, row_number() OVER (
        PARTITION BY {key}, CASE WHEN family(network) = 6
                                 THEN set_masklen(network, {ALLOCATION_PREFIX}) ELSE network END
        ORDER BY network) AS place
    FROM (SELECT DISTINCT {key}, network FROM (
            SELECT DISTINCT ON ({key}, mac) {key}, network FROM ({source}) s
            WHERE network IS NOT NULL ORDER BY {key}, mac, day) first) d) ranked
WHERE place <= {PER_ALLOCATION} GROUP BY {key}"""


def _window(keyed: bool) -> str:
    """The reports of the last %(days)s days (today included) of routers that count."""
    return f"""SELECT e.* FROM enforcement_days e JOIN routers r USING (mac)
WHERE e.day > %(today)s - %(days)s AND {counted(keyed)}"""


def _hits(keyed: bool) -> str:
    """The entries matched in the window, each no more than its list's day (`day_packets`,
    `day_bytes`: a router's entries together never count past that either)."""
    return f"""SELECT h.mac, h.day, h.list, h.entry, least(h.packets, d.packets) AS packets,
       least(h.bytes, d.bytes) AS bytes, d.packets AS day_packets, d.bytes AS day_bytes,
       d.network
FROM enforcement_hits h JOIN ({_window(keyed)}) d USING (mac, day, list)
WHERE h.packets > 0"""


# A day a list matched at: a block list dropped something, the IDS rules of a source alerted.
_MATCHED = "(packets > 0 OR (starts_with(list, 'ids.') AND alerts > 0))"


def lists_statement(keyed: bool) -> str:
    """Per list: routers and networks that reported it, that it matched at, packets, bytes,
    alerts, entries matched."""
    window, hits = _window(keyed), _hits(keyed)
    return f"""WITH w AS ({window}),
loaded AS ({counted_networks("SELECT list, mac, day, network FROM w", "list")}),
matched AS ({counted_networks(f"SELECT list, mac, day, network FROM w WHERE {_MATCHED}",
                              "list")}),
entries AS (SELECT list, count(DISTINCT entry) AS n FROM ({hits}) h GROUP BY list)
SELECT w.list, count(DISTINCT w.mac), coalesce(max(l.networks), 0),
       count(DISTINCT w.mac) FILTER (WHERE {_MATCHED}), coalesce(max(m.networks), 0),
       sum(w.packets), sum(w.bytes), sum(w.alerts), coalesce(max(e.n), 0)
FROM w LEFT JOIN loaded l USING (list) LEFT JOIN matched m USING (list)
       LEFT JOIN entries e USING (list)
GROUP BY w.list ORDER BY w.list"""


def entries_statement(keyed: bool) -> str:
    """The entries that matched most widely, per list: networks first, then packets."""
    hits = _hits(keyed)
    return f"""WITH h AS ({hits}),
nets AS ({counted_networks("SELECT list, entry, mac, day, network FROM h", "list, entry")})
SELECT * FROM (
    SELECT h.list, text(h.entry), coalesce(max(n.networks), 0) AS networks,
           count(DISTINCT h.mac), sum(h.packets) AS packets, sum(h.bytes),
           row_number() OVER (PARTITION BY h.list
                              ORDER BY coalesce(max(n.networks), 0) DESC, sum(h.packets) DESC,
                                       h.entry) AS place
    FROM h LEFT JOIN nets n USING (list, entry)
    GROUP BY h.list, h.entry) ranked
WHERE place <= %(top)s ORDER BY list, place"""


# A matched intel block entry is credited to the feeds' current addresses and networks it is:
# those equal to it, else (a block entry merged from several values) every one inside it. A
# feed's /16 is credited for a hit on it, not the addresses listed inside it too.
_CREDITED = """SELECT DISTINCT i.feed, i.kind, i.value, e.entry
FROM (SELECT DISTINCT entry FROM h) e JOIN intel_indicators i
  ON i.kind IN ('ip', 'network') AND (i.value::inet) <<= e.entry
WHERE i.expires_at > now()
  AND ((i.value::inet) = e.entry::inet OR NOT EXISTS (
        SELECT 1 FROM intel_indicators j WHERE j.kind IN ('ip', 'network')
          AND (j.value::inet) <<= e.entry AND (j.value::inet) = e.entry::inet
          AND j.expires_at > now()))"""


def feeds_statement(keyed: bool) -> str:
    """Per threat feed: its current addresses and networks, those a matched block entry
    holds, the routers and networks they matched at, packets and bytes (a router-day's of
    one feed no more than its intel list's day)."""
    hits = _hits(keyed)
    return f"""WITH h AS ({hits} AND h.list = 'intel'),
credited AS ({_CREDITED}),
fed AS (SELECT DISTINCT feed, entry FROM credited),
per_day AS (SELECT f.feed, h.mac, h.day, h.network, least(sum(h.packets), max(h.day_packets))
                   AS packets, least(sum(h.bytes), max(h.day_bytes)) AS bytes
            FROM fed f JOIN h USING (entry) GROUP BY f.feed, h.mac, h.day, h.network),
routers AS (SELECT feed, count(DISTINCT mac) AS n, sum(packets) AS packets,
                   sum(bytes) AS bytes FROM per_day GROUP BY feed),
nets AS ({counted_networks("SELECT feed, mac, day, network FROM per_day", "feed")}),
matched AS (SELECT feed, count(DISTINCT (kind, value)) AS n FROM credited GROUP BY feed),
held AS (SELECT feed, count(*) AS n FROM intel_indicators
         WHERE kind IN ('ip', 'network') AND expires_at > now() GROUP BY feed)
SELECT f.name, coalesce(held.n, 0), coalesce(matched.n, 0),
       coalesce(routers.n, 0), coalesce(nets.networks, 0),
       coalesce(routers.packets, 0), coalesce(routers.bytes, 0)
FROM intel_feeds f LEFT JOIN held ON held.feed = f.name
     LEFT JOIN routers ON routers.feed = f.name LEFT JOIN nets ON nets.feed = f.name
     LEFT JOIN matched ON matched.feed = f.name
ORDER BY f.name"""


def matched_values_statement(keyed: bool) -> str:
    """Each threat feed's current address or network credited with a matched intel block
    entry, with the networks that entry matched at, when at least %(min_networks)s:
    (kind, value, networks)."""
    hits = _hits(keyed)
    return f"""WITH h AS ({hits} AND h.list = 'intel'),
credited AS ({_CREDITED}),
nets AS ({counted_networks("SELECT entry, mac, day, network FROM h", "entry")})
SELECT c.kind, c.value, max(n.networks)::int FROM credited c JOIN nets n USING (entry)
GROUP BY c.kind, c.value HAVING max(n.networks) >= %(min_networks)s"""


def matched_fleet_statement(keyed: bool) -> str:
    """Each address of the fleet's list that matched at %(min_networks)s networks or more,
    with those networks: (address, networks)."""
    hits = _hits(keyed)
    return f"""WITH h AS ({hits} AND h.list = 'fleet'),
nets AS ({counted_networks("SELECT entry, mac, day, network FROM h", "entry")})
SELECT host(entry), networks::int FROM nets WHERE networks >= %(min_networks)s"""


# What `macs`' firewalls dropped in [start, end), per block list: each UTC day counted in
# the period its midnight falls in (a period starting within a day leaves that day out: its
# earlier hours may be another owner's).
BLOCKED_BETWEEN = """SELECT mac::text, list, sum(packets), sum(bytes) FROM enforcement_days
WHERE mac = ANY(%(macs)s::macaddr[]) AND NOT starts_with(list, 'ids.')
  AND day >= (%(start)s AT TIME ZONE 'UTC')::date
  AND (day::timestamp AT TIME ZONE 'UTC') >= %(start)s
  AND (day::timestamp AT TIME ZONE 'UTC') < %(end)s
GROUP BY mac, list"""


# One router's reports, newest day first.
ROUTER_DAYS = """SELECT day, list, packets, bytes, alerts, reports FROM enforcement_days
WHERE mac = %(mac)s AND day > %(today)s - %(days)s ORDER BY day DESC, list"""
ROUTER_ENTRIES = """SELECT list, text(entry), sum(packets), sum(bytes) FROM enforcement_hits
WHERE mac = %(mac)s AND day > %(today)s - %(days)s
GROUP BY list, entry ORDER BY sum(packets) DESC, list, entry LIMIT %(top)s"""
