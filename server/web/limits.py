"""Flood limits: token buckets per router and per client address, in each server process.

- requests per router (every router endpoint but /health and /enroll),
- telemetry records per router (counted as a body streams; the request that runs out is
  refused whole, 429, and stores nothing),
- failed credentials (wrong router keys, wrong enrollment tokens, wrong console secrets) per
  client address: each attempt takes its place in the allowance before its (slow) check and
  gives it back only when the credential was right, so guesses sent together are checked no
  more than the allowance; past it, 429 before any check, and one log line per address a
  minute.

Client addresses are counted per address for IPv4 and per /IPV6_LIMIT_PREFIX network (64 by
default: what one subscriber gets) for IPv6, so one host cannot multiply its allowance by
taking more addresses of its own network; an IPv4-mapped IPv6 address counts as its IPv4 one.

A bucket holds up to one minute's allowance and refills continuously, so a router may spend
a minute's worth at once and then its rate. Under the supervisor (HTTP_WORKERS > 1) the
buckets are the host's, shared by its HTTP workers through a mapped file
(host_buckets.py), so that a client spreading its requests over N workers does not get N
times its limit; a lone process keeps its own. Buckets that refilled to the brim are
forgotten when there are many, so memory follows the routers active in the last minute.
Several hosts each count their own. New routers per client address are limited by the
registration protocol (server/routers/registration.py), which counts them under `bucket`.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time

from engine.addresses import carried
from server.errors import TooManyRequests
from server.metrics import Metrics
from server.web.host_buckets import HostBuckets, TableFile, refilled, seconds_short

log = logging.getLogger("router_backend.trust")

PRUNE_ABOVE = 100_000  # buckets per limit before full ones are forgotten
LOG_EVERY_SECONDS = 60.0


def next_prune(live: int) -> int:
    """The size at which a table of buckets is pruned next, after a prune left `live`: with
    more live keys than PRUNE_ABOVE (a flood from that many addresses), pruning again at
    the next insert made every request a pass over all of them."""
    return max(PRUNE_ABOVE, 2 * live)


def address_bucket(address: str, ipv6_prefix: int) -> str:
    """The key an address is counted under: the IPv4 address it carries (engine/addresses.py:
    a 6to4 or Teredo client is its IPv4 NAT), or its /ipv6_prefix network."""
    try:
        ip = carried(address)
    except ValueError:
        return address
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/{ipv6_prefix}", strict=False))
    return str(ip)


class Buckets:
    """One token bucket per key, each holding up to `per_minute` tokens. Kept rather than
    the `limits` library: every request takes a token, and its in-memory limiters cost 2.9
    (fixed window) to 6.5 µs (sliding window) per hit against 0.6 µs here (limits 5.8,
    timeit, 1,000 keys), with an expiry thread of their own."""

    def __init__(self, per_minute: int):
        self.capacity = float(per_minute)
        self._rate = per_minute / 60.0
        self._buckets: dict[str, tuple[float, float]] = {}   # key -> (tokens, at)
        self._prune_above = PRUNE_ABOVE

    def available(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (self.capacity, now))
        return refilled(tokens, at, now, self.capacity, self._rate)

    def take(self, key: str, count: float, now: float) -> float:
        """Take `count` tokens: 0.0 when taken, else the seconds until they would be there
        (nothing is taken then)."""
        tokens = self.available(key, now)
        if tokens >= count:
            if len(self._buckets) > self._prune_above:
                self._prune(now)
            self._buckets[key] = (tokens - count, now)
            return 0.0
        return seconds_short(count, tokens, self.capacity, self._rate)

    def give_back(self, key: str, count: float, now: float) -> None:
        self._buckets[key] = (min(self.capacity, self.available(key, now) + count), now)

    def _prune(self, now: float) -> None:
        self._buckets = {key: (tokens, at) for key, (tokens, at) in self._buckets.items()
                         if refilled(tokens, at, now, self.capacity, self._rate)
                         < self.capacity}
        self._prune_above = next_prune(len(self._buckets))


HOST_TABLES = 3  # requests, records and failures: a host table file's (host_buckets.py)


class FloodLimits:
    def __init__(self, requests_per_minute: int, records_per_minute: int,
                 metrics: Metrics, failures_per_minute: int = 10, ipv6_prefix: int = 64,
                 host_tables: TableFile | None = None):
        """`host_tables`: the host's table file, mapped (host_buckets.py), when its HTTP
        workers share their buckets."""

        def buckets(per_minute: int, table: int) -> Buckets | HostBuckets:
            return Buckets(per_minute) if host_tables is None else \
                HostBuckets(per_minute, host_tables, table)

        self.requests = buckets(requests_per_minute, 0)
        self.records = buckets(records_per_minute, 1)
        self.failures = buckets(failures_per_minute, 2)
        self._metrics = metrics
        self._ipv6_prefix = ipv6_prefix
        self._failures_logged: dict[str, tuple[float, int]] = {}  # bucket -> (at, unlogged)

    def request(self, mac: str) -> None:
        self._take(self.requests, "requests", mac, 1, "requests")

    def records_arrived(self, mac: str, count: int) -> None:
        self._take(self.records, "records", mac, count, "telemetry records")

    def bucket(self, address: str) -> str:
        """What the address is counted under (address_bucket at this process's prefix)."""
        return address_bucket(address, self._ipv6_prefix)

    def begin_attempt(self, address: str) -> None:
        """Take a credential attempt's place in the address's allowance, before the check;
        TooManyRequests when none is left. `attempt_succeeded` gives it back."""
        bucket = self.bucket(address)
        now = time.monotonic()
        wait = self.failures.take(bucket, 1, now)
        if wait:
            self._metrics.limited.labels("failed_credentials").inc()
            raise TooManyRequests(f"too many failed credentials from {bucket}: the limit is "
                                  f"{self.failures.capacity:g} a minute", _seconds(wait))

    def attempt_succeeded(self, address: str) -> None:
        """The credential was right (or never checked): its place is given back."""
        self.failures.give_back(self.bucket(address), 1, time.monotonic())

    def credential_failed(self, address: str, what: str) -> None:
        """The attempt's place stays taken; log the first failure of a minute at once, the
        rest with the next line."""
        bucket = self.bucket(address)
        now = time.monotonic()
        at, unlogged = self._failures_logged.get(bucket, (float("-inf"), 0))
        if now - at < LOG_EVERY_SECONDS:
            self._failures_logged[bucket] = (at, unlogged + 1)
            return
        if len(self._failures_logged) > PRUNE_ABOVE:
            self._failures_logged.clear()
        self._failures_logged[bucket] = (now, 0)
        log.warning("failed credentials from %s: %s%s", bucket, what,
                    f" ({unlogged} more since the last line)" if unlogged else "")

    def _take(self, buckets: Buckets | HostBuckets, limit: str, key: str, count: int,
              what: str) -> None:
        wait = buckets.take(key, count, time.monotonic())
        if wait:
            self._metrics.limited.labels(limit).inc()
            raise TooManyRequests(f"this router is over its limit of {buckets.capacity:g} "
                                  f"{what} a minute; nothing of this request was stored",
                                  _seconds(wait))


def _seconds(wait: float) -> int:
    return max(1, math.ceil(wait))
