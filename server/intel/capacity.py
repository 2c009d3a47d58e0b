"""The threat intelligence document a router gets for what it declared (Router-Capacity,
server/polling/capacity.py: docs/router-api.md).

The router gets the document of the largest size of SIZES (server/polling/capacity.py)
that fits `datasets`, `memory` (an entry costs ENTRY_BYTES on the router: Suricata's
datasets take 100-170 bytes an entry) and `sets` (the document's block entries, at most its
entries, go into one firewall set), capped by INTEL_MAX_ENTRIES, and without JA4
fingerprints (nor the rule naming `ja4.hash`, which a Suricata without JA4 refuses) unless it
says it has JA4. A router that names neither `datasets` nor `memory` gets DEFAULT entries
(or `sets`, if fewer), without JA4: what a home router of 256 MB, most of it Suricata's,
holds (1.7 MB at ENTRY_BYTES); so does a router that sends no header.

The sizes are few so that the documents stay shared: routers of like capacity get one
document, one ETag, answered 304 from memory; at most len(SIZES) × 2 documents are built
per change, whatever the fleet. A smaller document is the larger one's first entries in the
delivery statement's order (each feed's highest confidence first, then its most recently
seen, the feeds in turns: server/intel/sql.py DELIVERED). A number past any size is the
largest size."""

from __future__ import annotations

from dataclasses import dataclass

from server.polling.capacity import SIZES, declared, largest_fitting

DEFAULT = 10_000  # a router that names no bound
ENTRY_BYTES = 170


@dataclass(frozen=True, order=True)
class Capacity:
    entries: int   # one of SIZES (capped)
    ja4: bool

    @property
    def name(self) -> str:
        """The document's name among the versions kept (server/polling/versions.py)."""
        return f"intel-{self.entries}{'-ja4' if self.ja4 else ''}"


def capacity(header: str | None, max_entries: int) -> Capacity:
    """The document a router naming `header` gets; CapacityInvalid when it is malformed."""
    said = declared(header)
    memory = None if said.memory is None else said.memory // ENTRY_BYTES
    datasets = [bound for bound in (said.datasets, memory) if bound is not None]
    room = min(datasets) if datasets else DEFAULT
    if said.sets is not None:
        room = min(room, said.sets)
    return Capacity(largest_fitting(room, max_entries), said.ja4)


def document_names(max_entries: int) -> list[str]:
    """The names of every threat intelligence document a router may be sent."""
    return sorted({Capacity(min(size, max_entries), ja4).name
                   for size in SIZES for ja4 in (False, True)})
