"""The compromised-IP list shipped in the rule archive (`rules/compromised-ips.txt`)."""

from __future__ import annotations

import ipaddress
from pathlib import Path


def read_compromised_ips(path: Path) -> list[str]:
    """Valid IPv4/IPv6 addresses or networks, one per line, in file order, without duplicates.
    Comments (`#`) and malformed lines are skipped."""
    seen: dict[str, None] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        address = str(network.network_address) if network.num_addresses == 1 else str(network)
        seen.setdefault(address, None)
    return list(seen)
