"""What a router says it can hold, on each poll, in one header (docs/router-api.md):

    Router-Capacity: datasets=30000, memory=8000000, ja4=1, sets=65536, rules=20000

`datasets`: dataset entries its Suricata loads; `memory`: the bytes it gives them; `ja4`:
whether its Suricata has JA4 (1) or not (0); `sets`: the entries one of its firewall sets
holds (an ipset's `maxelem`, 65,536 by default); `rules`: the IDS rules it loads. Each is
optional, at most once. This module reads the grammar; the shared documents choose their
size from it (server/intel/capacity.py, server/fleet/document.py), the router's own
payloads are generated within it (server/generation/rules_sql.py stores it). A header that
is not this grammar is refused (400)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from server.refusal import Refusal

HEADER = "Router-Capacity"
SIZES = (0, 1_000, 3_000, 10_000, 30_000, 100_000)  # few, so that documents stay shared
MAX_HEADER = 200
_FIELD = re.compile(r"\s*(datasets|memory|ja4|sets|rules)\s*=\s*([0-9]{1,15})\s*")


class CapacityInvalid(Refusal):
    """A Router-Capacity header that is not `name=number, ...` of the names known."""


@dataclass(frozen=True)
class Declared:
    """What a router declared; None where it named nothing."""
    datasets: int | None = None
    memory: int | None = None
    ja4: bool = False
    sets: int | None = None
    rules: int | None = None


@functools.lru_cache(maxsize=1024)  # every poll names one; a fleet, a few of them
def declared(header: str | None) -> Declared:
    """The declaration `header` (None: no header) holds; CapacityInvalid when malformed."""
    if header is None:
        return Declared()
    if len(header) > MAX_HEADER:
        raise CapacityInvalid(f"{HEADER}: at most {MAX_HEADER} characters")
    named: dict[str, int] = {}
    for part in header.split(","):
        found = _FIELD.fullmatch(part)
        if found is None or found[1] in named:
            raise CapacityInvalid(f"{HEADER}: expected datasets=N, memory=BYTES, ja4=0|1, "
                                  f"sets=N, rules=N (each at most once), "
                                  f"got {part.strip()[:40]!r}")
        named[found[1]] = int(found[2])
    if named.get("ja4", 0) not in (0, 1):
        raise CapacityInvalid(f"{HEADER}: ja4 is 0 or 1")
    return Declared(named.get("datasets"), named.get("memory"), named.get("ja4", 0) == 1,
                    named.get("sets"), named.get("rules"))


def largest_fitting(room: int, max_entries: int) -> int:
    """The largest of SIZES not past `room`, and at most `max_entries` (the operator's cap):
    a document of that many entries fits."""
    return min(max(size for size in SIZES if size <= room), max_entries)
