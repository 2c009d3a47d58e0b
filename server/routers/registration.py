"""The registration protocol, in one place: a new router registered on first contact (open
mode) or by enrolling, at most REGISTRATIONS_PER_MINUTE_PER_ADDRESS a minute per client
address (its bucket: server/web/limits.py address_bucket).

The limit is counted in the database across processes (server/routers/sql.py register_from,
server/routers/key_sql.py enroll: the bucket's advisory lock, then one statement). In each
process a gate lets one registration per address at a time go to the database, and none
while the database last said the address is full, so a flood of new MACs from one address
waits here, holding no database connection, and is refused without a registration; at most
MAX_WAITING_PER_ADDRESS of its requests wait (aiohttp does not cancel a handler whose client
left, so requests sent and abandoned at once queued without bound). A router registered
before is never refused: while its address is known full it is let in after one read.
"""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

from server.db.pool import Database
from server.routers.errors import RegistrationsBusy
from server.metrics import Metrics
from server.routers import key_sql as keys_db
from server.routers import sql as router_db
from server.web.limits import PRUNE_ABOVE, next_prune

MAX_WAITING_PER_ADDRESS = 32  # registrations of one address waiting their turn, per process


class RegistrationGate:
    """Per address bucket, in this process: one registration at a time goes to the database,
    and none until the time the database gave when it last refused the bucket (its oldest
    registration of the minute leaving it). That refusal is the database's answer kept for a
    moment, so the limit itself stays the database's; a removal of a router within that
    moment is seen only once it passes."""

    def __init__(self) -> None:
        self._turns: dict[str, tuple[asyncio.Lock, int]] = {}  # bucket -> (lock, holders)
        self._full_until: dict[str, float] = {}
        self._prune_above = PRUNE_ABOVE

    @asynccontextmanager
    async def turn(self, bucket: str) -> AsyncIterator[float]:
        """Wait for the bucket's turn; yields the seconds it is still known full (0.0: ask
        the database)."""
        lock, holders = self._turns.get(bucket) or (asyncio.Lock(), 0)
        self._turns[bucket] = (lock, holders + 1)
        try:
            async with lock:
                yield self.full_for(bucket)
        finally:
            lock, holders = self._turns[bucket]
            if holders == 1:
                del self._turns[bucket]
            else:
                self._turns[bucket] = (lock, holders - 1)

    def full_for(self, bucket: str) -> float:
        """Seconds the bucket is still known full (0.0: not known full)."""
        return max(0.0, self._full_until.get(bucket, 0.0) - time.monotonic())

    def waiting(self, bucket: str) -> int:
        """The bucket's requests in or waiting for its turn."""
        return self._turns.get(bucket, (None, 0))[1]

    def full(self, bucket: str, wait_seconds: float) -> None:
        """The database found the bucket full for `wait_seconds` (only its answers are kept:
        a refusal from this memory, set again, would prolong it under a flood)."""
        now = time.monotonic()
        if len(self._full_until) > self._prune_above:
            self._full_until = {key: until for key, until in self._full_until.items()
                                if until > now}
            self._prune_above = next_prune(len(self._full_until))
        self._full_until[bucket] = now + wait_seconds


class Registrations:
    """This process's side of the protocol: the gate, and the 429 of a full address."""

    def __init__(self, db: Database, per_minute: int, metrics: Metrics):
        self._db = db
        self.per_minute = per_minute
        self._gate = RegistrationGate()
        self._metrics = metrics

    def known_full(self, bucket: str) -> float:
        """Seconds the address is still known full (0.0: ask the database)."""
        return self._gate.full_for(bucket)

    async def register(self, mac: str, bucket: str) -> bool:
        """Register `mac` calling from `bucket` in the address's turn; whether it is new.
        RegistrationsBusy when the address is full (a router registered before is let in)."""
        async with self._turn(bucket) as full_for:
            if full_for:
                if await router_db.is_registered(self._db, mac):
                    return False
                raise self._refused(bucket, math.ceil(full_for))
            registration = await router_db.register_from(self._db, mac, bucket, self.per_minute)
        if registration.limited:
            raise self._full(bucket, registration.wait_seconds)
        return registration.new

    async def enroll(self, mac: str, digest: bytes, registration_open: bool, bucket: str
                     ) -> keys_db.Enrollment:
        """Enroll `mac` with its key's hash in the address's turn, always asked of the
        database (a known router enrolls from a full address); RegistrationsBusy when a new
        router's address is full (open mode)."""
        async with self._turn(bucket):
            outcome = await keys_db.enroll(self._db, mac, digest, registration_open, bucket,
                                           self.per_minute)
        if not outcome.registered and registration_open:
            raise self._full(bucket, outcome.wait_seconds)
        return outcome

    def _turn(self, bucket: str):
        if self._gate.waiting(bucket) >= MAX_WAITING_PER_ADDRESS:
            self._metrics.limited.labels("registrations").inc()
            raise RegistrationsBusy(f"too many new routers from {bucket} at once: the limit "
                                  f"is {MAX_WAITING_PER_ADDRESS} waiting their turn", 1)
        return self._gate.turn(bucket)

    def _full(self, bucket: str, wait_seconds: int) -> RegistrationsBusy:
        """The database found the address full: the gate keeps it so for `wait_seconds`."""
        self._gate.full(bucket, wait_seconds)
        return self._refused(bucket, wait_seconds)

    def _refused(self, bucket: str, wait_seconds: int) -> RegistrationsBusy:
        self._metrics.limited.labels("registrations").inc()
        return RegistrationsBusy(f"too many new routers from {bucket}: the limit is "
                               f"{self.per_minute} a minute", wait_seconds)
