"""Per-router keys (ROUTER_AUTH=key): making them, and checking the one a request presents.

A key is 256 random bits, shown once; only its SHA-256 is stored and kept in memory. Each
process remembers a router's key hash for ROUTER_CACHE_SECONDS, so a poll costs one hash of
a short string and a constant-time comparison; a key that does not match the remembered hash
is checked against the database once more before it is refused (it may just have been
rotated elsewhere). A rotated or revoked key stops working at once in every process: the
statement that changes it notifies channel `router_keys` in its transaction, and each
process's LISTEN connection (server/polling/etag_cache.py) makes it forget the key
(`forget`). While that connection is down, a remembered key is trusted for at most
ROUTER_CACHE_SECONDS.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from typing import Mapping

from server.routers import key_sql as keys_db
from server.db.pool import Database
from server.routers.errors import CredentialsWrong, EnrollmentRefused, IdentityMissing, NotAllowed
from server.routers.registration import Registrations
from server.web.limits import FloodLimits
from server.metrics import Metrics

log = logging.getLogger("router_backend.trust")

MAX_REMEMBERED = 500_000


def new_key() -> str:
    return secrets.token_urlsafe(32)


def key_hash(key: str) -> bytes:
    """Of a key as presented: bytes that are not UTF-8 (surrogates in a header's value)
    hash as sent, a key that matches none."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def bearer_token(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class RouterKeys:
    def __init__(self, db: Database, cache_seconds: int, metrics: Metrics,
                 limits: FloodLimits, registrations: Registrations):
        self._db = db
        self._limits = limits
        self._registrations = registrations
        self._cache_seconds = cache_seconds
        self._metrics = metrics
        self._known: dict[str, tuple[bytes, float]] = {}   # mac -> (key hash, trusted until)
        self._changes = 0  # key changes notified: a key read before one is not remembered

    def forget(self, mac: str) -> None:
        """The router's key was replaced or revoked (notified by the database, channel
        `router_keys`, to every process): trust it no more."""
        self._changes += 1
        self._known.pop(mac, None)

    def forget_all(self) -> None:
        self._changes += 1
        self._known.clear()

    async def check(self, headers: Mapping[str, str], address: str, mac: str) -> None:
        """For a request `trusted` refused: IdentityMissing or CredentialsWrong unless its headers carry this
        router's current key (then trusted for a while); 429 while the client's `address` is
        over its failed-credential limit (the attempt counted before the key is looked up)."""
        self._limits.begin_attempt(address)
        presented = bearer_token(headers)
        if presented is None:
            self._refuse(address, mac, "no key")
            raise IdentityMissing("missing router key (Authorization: Bearer <router key>)")
        digest = key_hash(presented)
        changes = self._changes
        try:
            stored = await keys_db.key_hash_of(self._db, mac)
        except BaseException:  # not a wrong key: the database is away (503)
            self._limits.attempt_succeeded(address)
            raise
        if stored is None or not hmac.compare_digest(stored, digest):
            self._refuse(address, mac, "wrong key" if stored else "no key issued")
            raise CredentialsWrong("invalid router key")
        self._limits.attempt_succeeded(address)
        if changes != self._changes:  # a key changed while this one was read: not kept
            return
        if len(self._known) >= MAX_REMEMBERED:
            self._known.clear()
        self._known[mac] = (stored, time.monotonic() + self._cache_seconds)

    def trusted(self, headers: Mapping[str, str], mac: str) -> bool:
        """Whether the request's headers carry the key this process remembers for the router,
        within its trust period (no database asked, nothing logged when not)."""
        presented = bearer_token(headers)
        known, until = self._known.get(mac, (b"", 0.0))
        return (presented is not None and until > time.monotonic()
                and hmac.compare_digest(known, key_hash(presented)))

    async def enroll(self, headers: Mapping[str, str], address: str, mac: str, token: str,
                     registration_open: bool) -> tuple[str, keys_db.Enrollment]:
        """Issue the router's key against the fleet's enrollment token: the key, and what
        the enrollment did. IdentityMissing, CredentialsWrong, NotAllowed or EnrollmentRefused
        when refused."""
        self._limits.begin_attempt(address)
        if not token:
            self._limits.attempt_succeeded(address)
            self._count("enroll_refused", "enrollment of %s from %s refused: enrollment is off",
                        mac, address)
            raise NotAllowed("enrollment is off (ENROLLMENT_TOKEN is not set)")
        presented = bearer_token(headers) or ""
        if not hmac.compare_digest(presented.encode("utf-8", "surrogateescape"),
                                   token.encode()):
            self._metrics.auth_events.labels("enroll_refused").inc()
            self._limits.credential_failed(address, f"wrong enrollment token (for {mac})")
            raise CredentialsWrong("wrong enrollment token")
        self._limits.attempt_succeeded(address)
        key = new_key()
        bucket = self._limits.bucket(address)
        outcome = await self._registrations.enroll(mac, key_hash(key), registration_open,
                                                   bucket)
        if not outcome.registered:
            self._count("enroll_refused", "enrollment of %s from %s refused: not subscribed",
                        mac, address)
            raise NotAllowed("router is not subscribed (registration is closed)")
        if not outcome.issued:
            why = "its reset window has passed" if outcome.window_closed else "already enrolled"
            self._count("enroll_conflict", "enrollment of %s from %s refused: %s", mac,
                        address, why)
            raise EnrollmentRefused(f"this router cannot enroll: {why}; an operator can allow one "
                           "enrollment for a while with `router-backend subscriptions reset "
                           "MAC`")
        self._count("enrolled", "router %s enrolled from %s", mac, address, level=logging.INFO)
        return key, outcome

    def _count(self, event: str, message: str, *args, level: int = logging.WARNING) -> None:
        self._metrics.auth_events.labels(event).inc()
        log.log(level, message, *args)

    def _refuse(self, address: str, mac: str, why: str) -> None:
        self._metrics.auth_events.labels("key_refused").inc()
        self._limits.credential_failed(address, f"router key refused for {mac}: {why}")
