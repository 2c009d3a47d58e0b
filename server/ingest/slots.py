"""How many uploads one router may have in progress at once in this process.

An agent uploads one body at a time; a router with more in flight is retrying wildly or is
not a router. Without the cap, one MAC's stalled uploads would fill the ingestion pool and
every other router's upload would wait behind them.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from server.errors import TooManyRequests

RETRY_AFTER_SECONDS = 5


class UploadSlots:
    def __init__(self, per_router: int):
        self._per_router = per_router
        self._active: dict[str, int] = {}

    @contextlib.contextmanager
    def take(self, mac: str) -> Iterator[None]:
        """Hold one of the router's slots for the block; TooManyRequests when none is free."""
        active = self._active.get(mac, 0)
        if active >= self._per_router:
            raise TooManyRequests(f"this router already has {active} uploads in progress",
                                  RETRY_AFTER_SECONDS)
        self._active[mac] = active + 1
        try:
            yield
        finally:
            remaining = self._active[mac] - 1
            if remaining:
                self._active[mac] = remaining
            else:
                del self._active[mac]
