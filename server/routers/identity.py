"""Router identity: the `X-ID` header, registration on first contact, closed-mode admission.

New registrations go through the registration protocol (server/routers/registration.py:
the client address's limit, counted in the database, and this process's gate). Each server
process remembers which routers it has seen registered, so a polling router costs
no registration query after its first call. A router removed is forgotten when the change
feed says so (server/app.py): its next call is checked again (closed mode: refused; open
mode: registered anew). Closed mode also re-checks after ROUTER_CACHE_SECONDS, so a removal
takes effect within that time while the feed is down.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from multidict import CIMultiDictProxy  # a request's headers (aiohttp's)

from server.routers import sql as router_db
from server.db.pool import Database
from server.routers.errors import IdentityInvalid, IdentityMissing, NotAllowed
from server.routers.registration import Registrations
from server.web.limits import FloodLimits
from server.routers.mac import InvalidMac, normalise_mac

HEADER = "X-ID"
MAX_REMEMBERED = 500_000


def mac_from_header(headers: CIMultiDictProxy[str]) -> str:
    """The router's MAC from its one X-ID header. Two headers are refused rather than one of
    them picked: a proxy or client that adds its own would otherwise decide who is calling."""
    values = headers.getall(HEADER, ())
    if len(values) > 1:
        raise IdentityInvalid(f"{len(values)} {HEADER} headers; send exactly one")
    value = values[0] if values else None
    if value is None or not value.strip():
        raise IdentityMissing(f"missing {HEADER} header (the router's MAC address)")
    try:
        return normalise_mac(value)
    except InvalidMac as error:
        raise IdentityInvalid(f"invalid {HEADER} header: {error}") from None


class RouterRegistry:
    def __init__(self, db: Database, mode: str, cache_seconds: int, limits: FloodLimits,
                 registrations: Registrations, on_new_router: Callable[[], None] = lambda: None):
        self._db = db
        self._limits = limits
        self._registrations = registrations
        self._open = mode == "open"
        self._cache_seconds = cache_seconds
        self._on_new_router = on_new_router
        self._admitted_until: dict[str, float] = {}

    async def admit(self, mac: str, address_of: Callable[[], str]) -> None:
        """Register (open mode) or check (closed mode) the router; NotAllowed when refused,
        RegistrationsBusy when the client's address (asked for only in open mode) registered
        too many new routers lately."""
        if self.admitted(mac):
            return
        now = time.monotonic()
        if self._open:
            bucket = self._limits.bucket(address_of())
            if (self._registrations.known_full(bucket)
                    or not await router_db.is_registered(self._db, mac)):
                if await self._registrations.register(mac, bucket):
                    self._on_new_router()
            until = float("inf")
        elif await router_db.is_registered(self._db, mac):
            until = now + self._cache_seconds
        else:
            raise NotAllowed("router is not subscribed (registration is closed)")
        self._remember(mac, until)

    def admitted(self, mac: str) -> bool:
        """Whether this process admitted the router lately (no database asked)."""
        return self._admitted_until.get(mac, 0.0) > time.monotonic()

    def forget(self, mac: str) -> None:
        self._admitted_until.pop(mac, None)

    def forget_all(self) -> None:
        self._admitted_until.clear()

    def note_new_router(self, mac: str) -> None:
        """A router registered by another path (enrollment): admit it and wake generation."""
        self._remember(mac, float("inf") if self._open else
                       time.monotonic() + self._cache_seconds)
        self._on_new_router()

    def _remember(self, mac: str, until: float) -> None:
        if len(self._admitted_until) >= MAX_REMEMBERED:
            self._admitted_until.clear()
        self._admitted_until[mac] = until
