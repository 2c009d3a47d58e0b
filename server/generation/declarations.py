"""What each router declared it holds (Router-Capacity), as this process last wrote it: a
poll naming the declaration this process wrote for that router within RECHECK_SECONDS
writes nothing, so the poll's round trip carries the declaration's statement only when it
may have changed (a router's first poll here, a changed header, and every RECHECK_SECONDS,
since another process may have written another meanwhile). Its cost on every poll was a
tenth of the poll's throughput (bench/poll_pair.py). A router removed (or its key changed)
is forgotten when the change feed says so (server/app.py), so one registered again has its
declaration written at its first poll."""

from __future__ import annotations

import time

from server.polling.capacity import Declared

RECHECK_SECONDS = 600.0
MAX_REMEMBERED = 200_000  # routers; cleared when full (their next polls write again)


class Declarations:
    def __init__(self) -> None:
        self._written: dict[str, tuple[Declared, float]] = {}  # mac -> (declared, until)

    def unchanged(self, mac: str, declared: Declared) -> bool:
        """Whether this process wrote `declared` for the router within RECHECK_SECONDS."""
        held = self._written.get(mac)
        return held is not None and held[0] == declared and held[1] > time.monotonic()

    def forget(self, mac: str) -> None:
        self._written.pop(mac, None)

    def forget_all(self) -> None:
        self._written.clear()

    def written(self, mac: str, declared: Declared) -> None:
        if len(self._written) >= MAX_REMEMBERED:
            self._written.clear()
        self._written[mac] = (declared, time.monotonic() + RECHECK_SECONDS)
