"""How many uploads one router, and one client address, may have in progress at once in this
process.

An agent uploads one body at a time; a router with more in flight is retrying wildly or is
not a router. Without the cap, one MAC's stalled uploads would fill the ingestion pool and
every other router's upload would wait behind them. The cap per client address (counted
like the other per-address limits: an IPv6 /64 is one address) does the same for one
client's many MACs: 12 MACs of one address each stalling an upload held the ingestion pool
and an honest upload waited 14 s (bench/stall_drill.py). Clients spread over many
addresses can still fill the pool; each stalled upload then ends at INGEST_BODY_IDLE_SECONDS.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from server.ingest.errors import UploadsBusy

RETRY_AFTER_SECONDS = 5


class UploadSlots:
    def __init__(self, per_router: int, per_address: int):
        self._per_router = per_router
        self._per_address = per_address
        self._routers: dict[str, int] = {}
        self._addresses: dict[str, int] = {}

    @contextlib.contextmanager
    def take(self, mac: str, address: str) -> Iterator[None]:
        """Hold one of the router's and one of the address's (its limit bucket's) slots for
        the block; UploadsBusy when either has none free."""
        if self._routers.get(mac, 0) >= self._per_router:
            raise UploadsBusy(f"this router already has {self._routers[mac]} uploads in "
                                  "progress", RETRY_AFTER_SECONDS)
        if self._addresses.get(address, 0) >= self._per_address:
            raise UploadsBusy(f"{address} already has {self._addresses[address]} uploads "
                                  "in progress", RETRY_AFTER_SECONDS)
        _add(self._routers, mac, 1)
        _add(self._addresses, address, 1)
        try:
            yield
        finally:
            _add(self._routers, mac, -1)
            _add(self._addresses, address, -1)


def _add(counts: dict[str, int], key: str, change: int) -> None:
    count = counts.get(key, 0) + change
    if count:
        counts[key] = count
    else:
        del counts[key]
