"""What a router says it can hold of the threat intelligence, and the document it gets for it.

An agent names its capacity on each poll, in a header (docs/router-api.md):

    Router-Capacity: datasets=30000, memory=8000000, ja4=0

`datasets`: dataset entries its Suricata can load; `memory`: bytes it gives to them; `ja4`:
whether its Suricata has JA4 (1) or not (0). Each is optional. The router gets the document
of the largest size of SIZES that fits both (an entry costs ENTRY_BYTES on the router:
Suricata's datasets take 100-170 bytes an entry), capped by INTEL_MAX_ENTRIES, and without
JA4 fingerprints (nor the rule naming `ja4.hash`, which a Suricata without JA4 refuses) unless
it says it has JA4. A router that names neither bound gets DEFAULT entries, without JA4: what
a home router of 256 MB, most of it Suricata's, holds (1.7 MB at ENTRY_BYTES); so does a
router that sends no header.

The sizes are few so that the documents stay shared: routers of like capacity get one
document, one ETag, answered 304 from memory; at most len(SIZES) × 2 documents are built
per change, whatever the fleet. A smaller document is the larger one's first entries in the
delivery statement's order (each feed's highest confidence first, then its most recently
seen, the feeds in turns: server/intel/sql.py DELIVERED). A header that is not this grammar
is refused (400); a number past any size is the largest size."""

from __future__ import annotations

import re
from dataclasses import dataclass

from server.refusal import Refusal

HEADER = "Router-Capacity"
SIZES = (0, 1_000, 3_000, 10_000, 30_000, 100_000)
DEFAULT = 10_000  # a router that names nothing
ENTRY_BYTES = 170
MAX_HEADER = 200
_FIELD = re.compile(r"\s*(datasets|memory|ja4)\s*=\s*([0-9]{1,15})\s*")


class CapacityInvalid(Refusal):
    """A Router-Capacity header that is not `name=number, ...` of the names known."""


@dataclass(frozen=True, order=True)
class Capacity:
    entries: int   # one of SIZES (capped)
    ja4: bool

    @property
    def name(self) -> str:
        """The document's name among the versions kept (server/polling/versions.py)."""
        return f"intel-{self.entries}{'-ja4' if self.ja4 else ''}"


def default(max_entries: int) -> Capacity:
    return Capacity(min(DEFAULT, max_entries), False)


def capacity(header: str | None, max_entries: int) -> Capacity:
    """The document a router naming `header` gets; CapacityInvalid when it is malformed."""
    if header is None:
        return default(max_entries)
    if len(header) > MAX_HEADER:
        raise CapacityInvalid(f"{HEADER}: at most {MAX_HEADER} characters")
    named: dict[str, int] = {}
    for part in header.split(","):
        found = _FIELD.fullmatch(part)
        if found is None or found[1] in named:
            raise CapacityInvalid(f"{HEADER}: expected datasets=N, memory=BYTES, ja4=0|1 "
                                  f"(each at most once), got {part.strip()[:40]!r}")
        named[found[1]] = int(found[2])
    if named.get("ja4", 0) not in (0, 1):
        raise CapacityInvalid(f"{HEADER}: ja4 is 0 or 1")
    bounds = [named[name] // per for name, per in (("datasets", 1), ("memory", ENTRY_BYTES))
              if name in named]
    room = min(bounds) if bounds else DEFAULT
    fitting = max(size for size in SIZES if size <= room)
    return Capacity(min(fitting, max_entries), named.get("ja4", 0) == 1)


def document_names(max_entries: int) -> list[str]:
    """The names of every threat intelligence document a router may be sent."""
    return sorted({Capacity(min(size, max_entries), ja4).name
                   for size in SIZES for ja4 in (False, True)})
