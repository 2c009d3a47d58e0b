"""The firewall payload: which addresses a router's firewall blocks, and why.

Entries come from the router's own alerts of high severity first (the telemetry summary
already keeps only those), then from `compromised-ips.txt`: one entry per address with every
reason, bounded by the firewall size limit. An alert's blocked address is its external
endpoint: the source when that is a globally routable unicast address (an inbound attack),
else the destination when that is (e.g. an outbound connection to a command-and-control
server); an alert between two local addresses blocks nothing.
"""

from __future__ import annotations

import functools
import ipaddress

# One row of the telemetry summary: (src_ip, dest_ip, signature id, severity, alert count).
AlertRow = tuple[str | None, str | None, int, int, int]


@functools.lru_cache(maxsize=65536)
def is_external(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_global and not ip.is_multicast


def alert_endpoints(alerts: list[AlertRow]) -> list[tuple[str, int, int, int]]:
    """(external address, sid, most severe severity, count) per address and signature."""
    endpoints: dict[tuple[str, int], list[int]] = {}
    for src, dest, sid, severity, count in alerts:
        address = next((a for a in (src, dest) if a and is_external(a)), None)
        if address is None:
            continue
        entry = endpoints.setdefault((address, sid), [severity, 0])
        entry[0] = min(entry[0], severity)
        entry[1] += count
    return [(address, sid, severity, count)
            for (address, sid), (severity, count) in endpoints.items()]


def firewall_entries(alerts: list[AlertRow], compromised: list[str],
                     limit: int) -> tuple[list[dict], bool]:
    """The payload's entries, most-alerted addresses first, and whether the limit cut some."""
    entries: dict[str, dict] = {}
    ordered = sorted(alert_endpoints(alerts), key=lambda e: (-e[3], e[2], e[0], e[1]))
    for address, sid, severity, count in ordered:
        entry = entries.setdefault(address, _entry(address))
        if "alert" not in entry["reasons"]:
            entry["reasons"].append("alert")
        entry["alerts"].append({"sid": sid, "severity": severity, "count": count})
    for address in compromised:
        entry = entries.setdefault(address, _entry(address))
        if "compromised-ips" not in entry["reasons"]:
            entry["reasons"].append("compromised-ips")
    values = list(entries.values())
    for entry in values:
        if not entry["alerts"]:
            del entry["alerts"]
    return values[:limit], len(values) > limit


def _entry(address: str) -> dict:
    """Addresses arrive validated (compromised list, database inet values)."""
    return {"address": address, "family": 6 if ":" in address else 4, "reasons": [],
            "alerts": []}
