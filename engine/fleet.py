"""What the fleet sees together: the external addresses that alerted at enough routers (the
fleet's attackers, blocked by every router) and the signatures that fired at enough routers
(outbreaks, kept in every router's IDS payload). Pure functions of what the server's query
counted (server/db/fleet.py); no database, no clock.

Poisoning is resisted by counting networks, not routers: each reporting router counts once
per address, and reporters are grouped by the network they poll from (an IPv4 /24, an IPv6
/48), so many routers behind one network count as one toward the threshold. Which routers
may report at all (keyed ones in key mode, none younger than the set age, none whose poll
address is unknown) is decided by the query, which also counts. The rails of a router's own
block list hold for the fleet's (engine/firewall.py), here: never an address that is not
globally routable unicast, never one on the fleet's allowlist, never one a router of the
fleet polls from, never the service's own.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from engine.firewall import Exemptions, is_external

# The IANA special-purpose ranges that are not globally routable, plus multicast: the query's
# cheap first cut of the endpoints it counts (is_external, exact, judges what it returns).
# IPv4-mapped and other IPv6 forms of IPv4 addresses are left to is_external.
NOT_GLOBAL = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
              "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16",
              "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/3",
              "::/127", "100::/64", "2001:db8::/32", "fc00::/7", "fe80::/10", "ff00::/8")

SIGNATURES_SHOWN = 10  # per address in the routers' document (operators see every one)
HOUR_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def expires_at(last_hour: str, window_hours: int) -> str:
    """The end of the last hour reported, plus the window."""
    moment = datetime.strptime(last_hour, HOUR_FORMAT) + timedelta(hours=1 + window_hours)
    return moment.strftime(HOUR_FORMAT)


def fleet_attackers(found: list[dict], exemptions: Exemptions, max_entries: int,
                    window_hours: int) -> list[dict]:
    """The fleet's attackers among the addresses the query found at enough networks (each a
    dict: address, routers, networks, alerts, severity, signatures, first_seen, last_seen,
    reporters): the rails applied, most networks (then routers) first, at most
    `max_entries`, each with its expiry."""
    kept = [entry for entry in found
            if is_external(entry["address"]) and not exemptions.exempt(entry["address"])]
    kept.sort(key=lambda entry: (-entry["networks"], -entry["routers"], entry["address"]))
    return [{**entry, "expires_at": expires_at(entry["last_seen"], window_hours)}
            for entry in kept[:max_entries]]


def fleet_outbreaks(found: list[dict], max_entries: int) -> list[dict]:
    """The signatures the query found firing at enough networks, most networks first."""
    return sorted(found, key=lambda entry: (-entry["networks"], -entry["routers"],
                                            entry["sid"]))[:max_entries]


def router_entries(attackers: list[dict], exemptions: Exemptions = Exemptions()) -> list[dict]:
    """The fleet's entries as a router gets them (GET /rules/fleet): what its block list
    needs and evidence that names no router; minus what `exemptions` holds (a router's own
    allowlist)."""
    return [{"address": entry["address"], "family": 6 if ":" in entry["address"] else 4,
             "reasons": ["fleet"], "expires_at": entry["expires_at"],
             "fleet": {"routers": entry["routers"], "networks": entry["networks"],
                       "signatures": entry["signatures"][:SIGNATURES_SHOWN],
                       "first_seen": entry["first_seen"], "last_seen": entry["last_seen"]}}
            for entry in attackers if not exemptions.exempt(entry["address"])]


def fleet_document(attackers: list[dict], exemptions: Exemptions = Exemptions()) -> dict:
    """The shared document: no time of its own, so equal inputs give equal bytes and its ETag
    moves only when what a router blocks (or why) changes. Hours, not seconds, so a running
    attack changes it at most hourly, unless routers or networks join."""
    entries = router_entries(attackers, exemptions)
    return {"entry_count": len(entries), "entries": entries}

