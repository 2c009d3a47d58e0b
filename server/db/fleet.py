"""The fleet's attackers and outbreaks in the database: what the `fleet` job counts over every
router's hourly alert summaries (`telemetry_alerts`), the tables it replaces
(`fleet_attackers`, `fleet_outbreaks`, migration 0024) and what reads them.

The counting is one statement per list, so that the rows never leave the database: each
alert row is joined to its router when that router may report (a poll address known,
registered at least `min_age` ago, keyed when `keyed`), its reporter network is the /24 or
/48 of that address, and only keys (addresses, signatures) seen from at least `min_networks`
networks come back, with their evidence. Under Citus the join runs on every shard (the
tables are co-located by `mac`) and the grouping by address or signature on the coordinator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

from engine.firewall import Exemptions
from engine.fleet import NOT_GLOBAL
from server.db.pool import Database, execute

CHANNEL = "fleet_list"  # notified when the lists (or the fleet's allowlist) change
FLEET_CHANGED = f"SELECT pg_notify('{CHANNEL}', '')"
REPORTERS_KEPT = 50     # per entry, most alerts first: what operators see of who reported


@dataclass(frozen=True)
class Counting:
    window: timedelta
    severity: int          # attackers: alerts of this severity or more severe
    min_networks: int
    min_age: timedelta
    keyed: bool            # only routers with a key count (ROUTER_AUTH=key)

    def params(self) -> dict:
        return {"window": self.window, "severity": self.severity, "min": self.min_networks,
                "min_age": self.min_age, "not_global": list(NOT_GLOBAL),
                "kept": REPORTERS_KEPT}


_ISO = "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'"


def _hour(column: str) -> str:
    return f"to_char({column} AT TIME ZONE 'UTC', {_ISO})"


def _reporters(keyed: bool) -> str:
    key = " AND EXISTS (SELECT 1 FROM router_keys k WHERE k.mac = r.mac)" if keyed else ""
    return f"""reporters AS (
  SELECT r.mac, network(set_masklen(r.poll_address,
                                    CASE family(r.poll_address) WHEN 4 THEN 24 ELSE 48 END))
                AS network
  FROM routers r
  WHERE r.poll_address IS NOT NULL AND r.registered_at <= now() - %(min_age)s{key})"""


_WINDOW = "a.hour > now() - %(window)s - interval '1 hour' AND a.hour <= now()"
_EXTERNAL = "{0} IS NOT NULL AND NOT {0} <<= ANY(%(not_global)s::inet[])"


def _counted(key: str, shown: str, seen: str) -> str:
    """From `seen` (key, mac, network, sid, severity, alerts, hour): the keys seen from enough
    networks, with their evidence; `shown` is how the key is returned."""
    return f"""{seen},
 listed AS (SELECT {key} FROM seen GROUP BY {key}
            HAVING count(DISTINCT network) >= %(min)s),
 mine AS (SELECT seen.* FROM seen JOIN listed USING ({key})),
 per_router AS (SELECT {key}, mac, network, sum(alerts) AS n FROM mine GROUP BY 1, 2, 3),
 per_sid AS (SELECT {key}, sid, sum(alerts) AS n FROM mine GROUP BY 1, 2)
SELECT {shown}, r.routers, r.networks, r.alerts, t.severity, s.sids,
       {_hour('t.first')}, {_hour('t.last')}, r.reporters
FROM (SELECT {key}, count(*) AS routers, count(DISTINCT network) AS networks,
             sum(n) AS alerts,
             to_jsonb((array_agg(json_build_array(mac::text, network::text, n)
                                 ORDER BY n DESC, mac))[1:%(kept)s]) AS reporters
      FROM per_router GROUP BY {key}) r
JOIN (SELECT {key}, array_agg(sid ORDER BY n DESC, sid) AS sids FROM per_sid GROUP BY {key}) s
  USING ({key})
JOIN (SELECT {key}, coalesce(min(severity), 255) AS severity, min(hour) AS first,
             max(hour) AS last FROM mine GROUP BY {key}) t USING ({key})"""


def attackers_statement(keyed: bool) -> str:
    """The external endpoint of each alert (the source when it is external, else the
    destination), as engine/firewall.py blocks it, counted per address."""
    endpoint = (f"CASE WHEN {_EXTERNAL.format('a.src_ip')} THEN a.src_ip "
                f"WHEN {_EXTERNAL.format('a.dest_ip')} THEN a.dest_ip END")
    seen = f"""WITH {_reporters(keyed)},
 seen AS (SELECT * FROM (
   SELECT {endpoint} AS address, a.mac, r.network, a.signature_id AS sid, a.severity,
          a.alerts, a.hour
   FROM telemetry_alerts a JOIN reporters r USING (mac)
   WHERE {_WINDOW} AND a.severity <= %(severity)s) endpoints WHERE address IS NOT NULL)"""
    return _counted("address", "host(address)", seen)


def outbreaks_statement(keyed: bool) -> str:
    seen = f"""WITH {_reporters(keyed)},
 seen AS (SELECT a.signature_id AS sid_key, a.mac, r.network, a.signature_id AS sid,
                 a.severity, a.alerts, a.hour
          FROM telemetry_alerts a JOIN reporters r USING (mac) WHERE {_WINDOW})"""
    return _counted("sid_key", "sid_key", seen)


_FIELDS = ("routers", "networks", "alerts", "severity", "signatures", "first_seen",
           "last_seen", "reporters")


async def count_attackers(db: Database, counting: Counting) -> list[dict]:
    rows = await db.fetchall(attackers_statement(counting.keyed), counting.params())
    return [{"address": row[0], **dict(zip(_FIELDS, row[1:]))} for row in rows]


async def count_outbreaks(db: Database, counting: Counting) -> list[dict]:
    rows = await db.fetchall(outbreaks_statement(counting.keyed), counting.params())
    outbreaks = []
    for row in rows:
        entry = {"sid": row[0], **dict(zip(_FIELDS, row[1:]))}
        del entry["signatures"]
        outbreaks.append(entry)
    return outbreaks


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


_INSERT_ATTACKER = """INSERT INTO fleet_attackers (address, routers, networks, alerts,
    severity, signatures, first_seen, last_seen, expires_at, reporters)
VALUES (%(address)s, %(routers)s, %(networks)s, %(alerts)s, %(severity)s, %(signatures)s,
        %(first_seen)s, %(last_seen)s, %(expires_at)s, %(reporters)s)"""
_INSERT_OUTBREAK = """INSERT INTO fleet_outbreaks (sid, severity, routers, networks, alerts,
    first_seen, last_seen, reporters)
VALUES (%(sid)s, %(severity)s, %(routers)s, %(networks)s, %(alerts)s, %(first_seen)s,
        %(last_seen)s, %(reporters)s)"""


async def replace(db: Database, attackers: list[dict], outbreaks: list[dict]) -> None:
    """Both lists replaced in one transaction, every server process notified at its commit."""
    async with db.transaction() as cur:
        await execute(cur, "DELETE FROM fleet_attackers")
        await execute(cur, "DELETE FROM fleet_outbreaks")
        for entry in attackers:
            await execute(cur, _INSERT_ATTACKER,
                          {**entry, "reporters": json.dumps(entry["reporters"])})
        for entry in outbreaks:
            await execute(cur, _INSERT_OUTBREAK,
                          {**entry, "reporters": json.dumps(entry["reporters"])})
        await execute(cur, FLEET_CHANGED)


async def notify_changed(db: Database) -> None:
    await db.execute(FLEET_CHANGED)


_ATTACKERS = f"""SELECT host(address), routers, networks, alerts, severity, signatures,
    {_hour('first_seen')}, {_hour('last_seen')}, reporters, {_hour('expires_at')}
FROM fleet_attackers ORDER BY networks DESC, routers DESC, address"""
_OUTBREAKS = f"""SELECT sid, routers, networks, alerts, severity, NULL,
    {_hour('first_seen')}, {_hour('last_seen')}, reporters
FROM fleet_outbreaks ORDER BY networks DESC, routers DESC, sid"""


async def attackers(db: Database) -> list[dict]:
    """The fleet's attackers as the job stored them, most widely reported first."""
    return [{"address": row[0], **dict(zip(_FIELDS, row[1:9])), "expires_at": row[9]}
            for row in await db.fetchall(_ATTACKERS)]


async def for_router(db: Database, mac: str) -> list[dict]:
    """The fleet's attackers this router gets (the allowlist's, fleet-wide and its own, out),
    with the operators' evidence."""
    allowlist = await fleet_allowlist(db) + (await own_allowlists(db)).get(mac, [])
    exempt = Exemptions.of(allowlist, []).exempt
    return [entry for entry in await attackers(db) if not exempt(entry["address"])]


async def outbreaks(db: Database) -> list[dict]:
    found = []
    for row in await db.fetchall(_OUTBREAKS):
        entry = {"sid": row[0], **dict(zip(_FIELDS, row[1:9]))}
        del entry["signatures"]
        found.append(entry)
    return found
