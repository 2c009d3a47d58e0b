"""Requests in progress, counted so that a drain can wait for them (server/process/shutdown.py)."""

from __future__ import annotations

import asyncio
import time

DRAIN_POLL_SECONDS = 0.05


class InFlight:
    """Counts requests in progress: the request middleware (server/web/middleware.py) adds
    and takes away from `count` itself, every request passing, and keeps the connections
    answering one in `answering` (which server/web/connections.py does not close first);
    while draining, its answers close their connection."""

    def __init__(self) -> None:
        self.count = 0
        self.answering: set[object] = set()  # the aiohttp handlers of the requests counted
        self.draining = False

    async def drain(self, timeout: float) -> bool:
        """Wait until no request is in progress; False when some still were after timeout.
        Polled: it happens once, at shutdown, where an event set and cleared by every
        request would cost each of them."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while self.count:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(DRAIN_POLL_SECONDS)
        return True
