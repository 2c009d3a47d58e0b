"""Requests in progress, counted so that a drain can wait for them (server/process/shutdown.py)."""

from __future__ import annotations

import asyncio


class InFlight:
    """Counts requests in progress (server/web/middleware.py); while draining, answers close
    their connection."""

    def __init__(self) -> None:
        self.count = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    def started(self) -> None:
        self.count += 1
        self._idle.clear()

    def finished(self) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def drain(self, timeout: float) -> bool:
        """Wait until no request is in progress; False when some still were after timeout."""
        self.draining = True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False
