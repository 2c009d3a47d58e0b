"""Flood limits: token buckets per router and per client address, in each server process.

- requests per router (every router endpoint but /health and /enroll),
- telemetry records per router (counted as a body streams; the request that runs out is
  refused whole, 429, and stores nothing),
- new registrations per client address (open registration mode).

A bucket holds up to one minute's allowance and refills continuously, so a router may spend
a minute's worth at once and then its rate. The limits are per process: with N processes a
client that spreads its requests gets up to N times as much. Buckets that refilled to the
brim are forgotten when there are many, so memory follows the routers active in the last
minute.
"""

from __future__ import annotations

import math
import time

from server.errors import TooManyRequests
from server.metrics import Metrics

PRUNE_ABOVE = 100_000  # buckets per limit before full ones are forgotten


class Buckets:
    """One token bucket per key, each holding up to `per_minute` tokens."""

    def __init__(self, per_minute: int):
        self.capacity = float(per_minute)
        self._rate = per_minute / 60.0
        self._buckets: dict[str, tuple[float, float]] = {}   # key -> (tokens, at)

    def available(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (self.capacity, now))
        return min(self.capacity, tokens + (now - at) * self._rate)

    def take(self, key: str, count: float, now: float) -> float:
        """Take `count` tokens: 0.0 when taken, else the seconds until they would be there
        (nothing is taken then)."""
        tokens = self.available(key, now)
        if tokens >= count:
            if len(self._buckets) > PRUNE_ABOVE:
                self._prune(now)
            self._buckets[key] = (tokens - count, now)
            return 0.0
        return (min(count, self.capacity) - tokens) / self._rate

    def _prune(self, now: float) -> None:
        self._buckets = {key: (tokens, at) for key, (tokens, at) in self._buckets.items()
                         if tokens + (now - at) * self._rate < self.capacity}


class FloodLimits:
    def __init__(self, requests_per_minute: int, records_per_minute: int,
                 registrations_per_minute: int, metrics: Metrics):
        self.requests = Buckets(requests_per_minute)
        self.records = Buckets(records_per_minute)
        self.registrations = Buckets(registrations_per_minute)
        self._metrics = metrics

    def request(self, mac: str) -> None:
        self._take(self.requests, "requests", mac, 1, "requests")

    def try_request(self, mac: str) -> bool:
        """Take a request's token when there is one; False (nothing taken, nothing counted)
        when the router is over its limit: the caller then goes the way that refuses."""
        return not self.requests.take(mac, 1, time.monotonic())

    def records_arrived(self, mac: str, count: int) -> None:
        self._take(self.records, "records", mac, count, "telemetry records")

    def may_register(self, address: str) -> bool:
        return self.registrations.available(address, time.monotonic()) >= 1

    def registered(self, address: str) -> None:
        self.registrations.take(address, 1, time.monotonic())

    def refuse_registration(self, address: str) -> TooManyRequests:
        self._metrics.limited.labels("registrations").inc()
        wait = self.registrations.take(address, 1, time.monotonic())
        return TooManyRequests(f"too many new routers from {address}: the limit is "
                               f"{self.registrations.capacity:g} a minute", _seconds(wait))

    def _take(self, buckets: Buckets, limit: str, key: str, count: int, what: str) -> None:
        wait = buckets.take(key, count, time.monotonic())
        if wait:
            self._metrics.limited.labels(limit).inc()
            raise TooManyRequests(f"this router is over its limit of {buckets.capacity:g} "
                                  f"{what} a minute; nothing of this request was stored",
                                  _seconds(wait))


def _seconds(wait: float) -> int:
    return max(1, math.ceil(wait))
