"""The threat intelligence document a router gets for what it declared (Router-Capacity,
server/polling/capacity.py: docs/router-api.md).

The router gets the document of the largest size of SIZES (server/polling/capacity.py)
that fits `datasets` and `memory` (an entry costs ENTRY_BYTES on the router: Suricata's
datasets take 100-170 bytes an entry), capped by INTEL_MAX_ENTRIES, and without JA4
fingerprints (nor the rule naming `ja4.hash`, which a Suricata without JA4 refuses) unless it
says it has JA4. A router that names neither `datasets` nor `memory` gets DEFAULT entries,
without JA4: what a home router of 256 MB, most of it Suricata's, holds (1.7 MB at
ENTRY_BYTES); so does a router that sends no header. When one of its firewall sets holds
fewer entries than that (`sets`), its document keeps as block entries only the first
`block` (the largest size `sets` holds) of its addresses and networks in the delivery order;
its addresses stay in the `ip` dataset.

The sizes are few so that the documents stay shared: routers of like capacity get one
document, one ETag, answered 304 from memory; at most one per pair of sizes, with and
without JA4 (42), are built per change, whatever the fleet, and only those routers ask for. A smaller document is the larger one's first entries in the
delivery statement's order (each feed's highest confidence first, then its most recently
seen, the feeds in turns: server/intel/sql.py DELIVERED). A number past any size is the
largest size."""

from __future__ import annotations

from dataclasses import dataclass

from server.polling.capacity import SIZES, declared, largest_fitting

DEFAULT = 10_000  # a router that names no bound
ENTRY_BYTES = 170


@dataclass(frozen=True)
class Capacity:
    entries: int   # one of SIZES (capped)
    ja4: bool
    block: int | None = None  # the block entries kept, when one set holds fewer than entries

    @property
    def name(self) -> str:
        """The document's name among the versions kept (server/polling/versions.py)."""
        block = "" if self.block is None else f"-b{self.block}"
        return f"intel-{self.entries}{'-ja4' if self.ja4 else ''}{block}"


def capacity(header: str | None, max_entries: int) -> Capacity:
    """The document a router naming `header` gets; CapacityInvalid when it is malformed."""
    said = declared(header)
    memory = None if said.memory is None else said.memory // ENTRY_BYTES
    datasets = [bound for bound in (said.datasets, memory) if bound is not None]
    entries = largest_fitting(min(datasets) if datasets else DEFAULT, max_entries)
    block = None if said.sets is None or said.sets >= entries \
        else largest_fitting(said.sets, max_entries)
    return Capacity(entries, said.ja4, block)


def document_names(max_entries: int) -> list[str]:
    """The names of every threat intelligence document a router may be sent."""
    entries = sorted({min(size, max_entries) for size in SIZES})
    return sorted({Capacity(size, ja4, block).name for size in entries for ja4 in (False, True)
                   for block in [None, *(kept for kept in entries if kept < size)]})
