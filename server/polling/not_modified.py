"""The 304 answer to a rules poll, decided from the request head alone: nearly every rules
poll is answered 304, so it is answered as soon as its head is parsed
(server/polling/connection.py), from memory, without a request object, a task or the
middleware chain.

A `GET /rules/ids` or `/rules/firewall` over HTTP/1.1 keep-alive, without a body, whose
router this process admitted lately (and whose key it trusts, in key mode), whose
If-None-Match names the payload's current ETag as the ETag cache knows it
(server/polling/etag_cache.py), and which is within the router's request budget, is
answered 304 here; it is counted and timed in the same metrics and logged in the access log
like any other. Anything else (a first poll, an ETag the cache does not know, a header to
refuse, a budget spent, a drain under way) goes to the application, which answers as it
always did. Nothing is taken from the budget unless the answer is given here.
"""

from __future__ import annotations

from aiohttp import web

from server.polling.etag_cache import not_modified, wanted_etags
from server.routers.mac import InvalidMac, normalise_mac
from server.typedefs import (ETAG_CACHE, FLOOD_LIMITS, IN_FLIGHT, METRICS, ROUTER_KEYS,
                             ROUTER_REGISTRY, SETTINGS)
from server.web.access_log import access_logged, log_access

PAYLOADS = {"/rules/ids": "ids", "/rules/firewall": "firewall"}


class NotModified:
    """Decides the polls it may answer from the app's caches, and records those answers as
    the app records its own. It sees a request head as plain values; how the head was
    parsed and how the 304 is written is server/polling/connection.py's business."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._observe = app[METRICS].request_tally.observe
        self.answered = 0  # polls answered here, without the application

    def current_etag(self, path: str, headers) -> tuple[str, str] | None:
        """(router, the payload's current ETag) when this GET of `path` (HTTP/1.1
        keep-alive, no body) may be answered 304 here, its request taken from the router's
        budget; None when the application must answer it."""
        kind = PAYLOADS.get(path)
        if kind is None:
            return None
        found = self._cached_etag(headers, kind)
        if found is None or not self._app[FLOOD_LIMITS].try_request(found[0]):
            return None
        return found

    def record(self, path: str, mac: str, remote: str, elapsed: float) -> None:
        """Count, time and log a 304 answered here, like any other answer."""
        self.answered += 1
        self._observe(path, "GET", 304, elapsed)
        if access_logged():
            log_access(remote, f"GET {path} HTTP/1.1", 304, 0, elapsed, mac)

    def _cached_etag(self, headers, kind: str) -> tuple[str, str] | None:
        app = self._app
        wanted = headers.get("If-None-Match")
        macs = headers.getall("X-ID", ())
        if wanted is None or len(macs) != 1 or app[IN_FLIGHT].draining:
            return None
        try:
            mac = normalise_mac(macs[0])
        except InvalidMac:
            return None
        if app[SETTINGS].router_auth == "key" and not app[ROUTER_KEYS].trusted(headers, mac):
            return None
        if not app[ROUTER_REGISTRY].admitted(mac):
            return None
        etag = app[ETAG_CACHE].etag(mac, kind)
        if etag is None or not not_modified(wanted_etags(wanted), etag):
            return None
        return mac, etag
