"""The compromised-IP list shipped in the rule archive (`rules/compromised-ips.txt`)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

# Where the list lies inside a published ruleset directory: the archive's own `rules/` folder
# is kept under the extraction folder `rules/`, so the seed's path is rules/rules/....
COMPROMISED_IPS_FILE = Path("rules", "rules", "compromised-ips.txt")


def compromised_ips_of(ruleset_dir: Path) -> list[str]:
    """The compromised-IP list of a published (or staged) ruleset directory."""
    return read_compromised_ips(ruleset_dir / COMPROMISED_IPS_FILE)


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
