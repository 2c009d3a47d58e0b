"""Routers' traffic per minute, kept in the database for `router-backend status` and the
console: telemetry records accepted and rejected, and uploads, per kind (`telemetry_minutes`;
the rejected records are stored nowhere else), and rules polls (`poll_minutes`, so the
console's polls per hour need not count a day of activations). Each process counts in memory
and adds its counts every FLUSH_SECONDS (and at shutdown), so a request costs no extra
statement and concurrent requests never contend for a row. Its loop keeps the name
`telemetry-tally` it has on dashboards."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from server.background import BackgroundTasks, pause
from server.db import traffic
from server.db.pool import Database, DatabaseUnavailable
from server.metrics import Metrics

log = logging.getLogger("router_backend.ingest")

FLUSH_SECONDS = 10
POLLS = "polls"   # the key of the polls' counts, beside the telemetry kinds


class TrafficTally:
    def __init__(self, db: Database, metrics: Metrics):
        self._db = db
        self._health = metrics.loop_health("telemetry-tally", log)
        self._counts: dict[tuple[datetime, str], list[int]] = {}  # accepted, rejected, uploads
        self._tasks = BackgroundTasks()

    def add(self, kind: str, accepted: int, rejected: int) -> None:
        self._count((_this_minute(), kind), accepted, rejected, 1)

    def poll(self) -> None:
        """A router asked whether its rules changed (/rules/last_updated)."""
        self._count((_this_minute(), POLLS), 1, 0, 0)

    def _count(self, key: tuple[datetime, str], accepted: int, rejected: int,
               uploads: int) -> None:
        counts = self._counts.setdefault(key, [0, 0, 0])
        counts[0] += accepted
        counts[1] += rejected
        counts[2] += uploads

    async def flush(self) -> None:
        pending, self._counts = self._counts, {}
        if not pending:
            self._health.succeeded()
            return
        uploads = {key: counts for key, counts in pending.items() if key[1] != POLLS}
        polls = {minute: counts[0] for (minute, kind), counts in pending.items()
                 if kind == POLLS}
        try:
            await traffic.add_counts(self._db, uploads, polls)
        except DatabaseUnavailable as error:  # keep them for the next flush
            for key, counts in pending.items():
                self._count(key, *counts)
            self._health.failed(f"traffic counts not stored yet ({error})")
            return
        self._health.succeeded()

    def start(self) -> None:
        self._tasks.spawn(self._loop(), "telemetry-tally")

    async def stop(self) -> None:
        await self._tasks.stop()
        await self.flush()

    async def _loop(self) -> None:
        while True:
            await pause(FLUSH_SECONDS)
            await self.flush()


def _this_minute() -> datetime:
    return datetime.now(timezone.utc).replace(second=0, microsecond=0)
