"""The firewall payload: which addresses a router's firewall blocks, why, and until when.

Entries come from the router's own alerts of high severity first (the telemetry summary
already keeps only those), then from `compromised-ips.txt`: one entry per address with every
reason, bounded by the firewall size limit. An alert's blocked address is its external
endpoint: the source when that is a globally routable unicast address (an inbound attack),
else the destination when that is (e.g. an outbound connection to a command-and-control
server); an alert between two local addresses blocks nothing.

Safety rails, so the block list cannot be turned against its router:
- an address is never blocked when it is not public (engine/addresses.py: IANA's
  special-purpose ranges, an explicit table), when it is on the allowlist (fleet-wide or the
  router's own) or held by the intel as seen by too much of the fleet (both given as the
  exemptions' networks), or when the router itself calls from it; the intel rules' alerts
  (engine/intel.py INTEL_SIDS) are no evidence of an attack; an IPv6 address that carries an
  IPv4 one is judged by that IPv4 address, so `::ffff:8.8.4.4` is on an allowlist holding
  8.8.0.0/16 and `64:ff9b::7f00:1` is loopback;
- an address is blocked for the router's alerts only after `min_alerts` alerts from at least
  two signatures or two flows (one spoofed packet that trips a rule blocks nothing), and
  such an entry carries `expires_at`: its last alert plus the telemetry window. Entries from
  the compromised list last as long as the list (`expires_at` null).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from engine.addresses import carried, canonical_network, is_public

# One row of the telemetry summary: (src_ip, dest_ip, signature id, severity, alert count,
# distinct flows, expires_at as ISO 8601 UTC).
AlertRow = tuple[str | None, str | None, int, int, int, int, str]


@dataclass(frozen=True)
class Exemptions:
    """Addresses never blocked for this router, whatever the reason."""
    networks: tuple = ()             # the allowlist (ip_network objects)
    own: frozenset = frozenset()     # addresses the router called from (ip_address objects)

    @classmethod
    def of(cls, allowlist: list[str], own_addresses: list[str]) -> "Exemptions":
        return cls(tuple(canonical_network(n) for n in allowlist),
                   frozenset(carried(a) for a in own_addresses))

    def exempt(self, address: str) -> bool:
        if not is_public(address):
            return True
        if not self.networks and not self.own:
            return False
        ip, written = carried(address), ipaddress.ip_address(address)
        return ip in self.own or written in self.own or any(
            ip in network or written in network for network in self.networks)


@dataclass
class _Evidence:
    alerts: list[dict]
    count: int = 0
    flows: int = 0
    expires_at: str = ""


def alert_evidence(alerts: list[AlertRow], exemptions: Exemptions,
                   ignored_sids: range = range(0)) -> dict[str, _Evidence]:
    """Per blockable external address: its alerts (per signature), count, flows, expiry;
    none of `ignored_sids` (the intel rules': they say that a device talked to a listed
    value, which the intel's own block list has or holds, not that it attacked the router)."""
    evidence: dict[str, _Evidence] = {}
    for src, dest, sid, severity, count, flows, expires_at in alerts:
        if sid in ignored_sids:
            continue
        address = next((a for a in (src, dest) if a and is_public(a)), None)
        if address is None or exemptions.exempt(address):
            continue
        entry = evidence.setdefault(address, _Evidence([]))
        entry.alerts.append({"sid": sid, "severity": severity, "count": count, "flows": flows})
        entry.count += count
        entry.flows += flows
        entry.expires_at = max(entry.expires_at, expires_at)
    return evidence


def _enough(evidence: _Evidence, min_alerts: int) -> bool:
    return evidence.count >= min_alerts and (len(evidence.alerts) >= 2 or evidence.flows >= 2)


def firewall_entries(alerts: list[AlertRow], compromised: list[str], limit: int,
                     min_alerts: int = 1, exemptions: Exemptions = Exemptions(),
                     ignored_sids: range = range(0)) -> tuple[list[dict], bool]:
    """The payload's entries, most-alerted addresses first, and whether the limit cut some;
    the alerts of `ignored_sids` are no evidence."""
    entries: dict[str, dict] = {}
    evidence = alert_evidence(alerts, exemptions, ignored_sids)
    ordered = sorted((item for item in evidence.items() if _enough(item[1], min_alerts)),
                     key=lambda item: (-item[1].count, item[0]))
    for address, found in ordered:
        found.alerts.sort(key=lambda a: (a["severity"], -a["count"], a["sid"]))
        entries[address] = {**_entry(address, "alert"), "alerts": found.alerts,
                            "expires_at": found.expires_at}
    for address in compromised:
        entry = entries.get(address)
        if entry is None:
            if exemptions.exempt(address):
                continue
            entries[address] = _entry(address, "compromised-ips")
        elif "compromised-ips" not in entry["reasons"]:
            entry["reasons"].append("compromised-ips")
            entry["expires_at"] = None  # held by the list as long as it names the address
    values = list(entries.values())
    return values[:limit], len(values) > limit


def _entry(address: str, reason: str) -> dict:
    """Addresses arrive validated (compromised list, database inet values)."""
    return {"address": address, "family": 6 if ":" in address else 4, "reasons": [reason],
            "expires_at": None}
