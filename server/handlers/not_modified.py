"""The 304 answer to a rules poll, decided from the request head alone: nearly every rules
poll is answered 304, so it is answered as soon as its head is parsed (server/connection.py),
from memory, without a request object, a task or the middleware chain.

A `GET /rules/ids` or `/rules/firewall` over HTTP/1.1 keep-alive, without a body, whose router
this process admitted lately (and whose key it trusts, in key mode), whose If-None-Match
names the payload's current ETag as the ETag cache knows it (server/etag_cache.py), and which
is within the router's request budget, is answered 304 here; it is counted and timed in the
same metrics and logged in the access log like any other. Anything else (a first poll, an
ETag the cache does not know, a header to refuse, a budget spent, a drain under way) goes to
the application, which answers as it always did. Nothing is taken from the budget unless the
answer is given here.
"""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.streams import EMPTY_PAYLOAD

from server.access_log import access_logged, log_access
from server.etag_cache import etag_header, not_modified, wanted_etags
from server.mac import InvalidMac, normalise_mac
from server.typedefs import (ETAG_CACHE, FLOOD_LIMITS, IN_FLIGHT, METRICS, ROUTER_KEYS,
                             ROUTER_REGISTRY, SETTINGS)

PAYLOADS = {"/rules/ids": "ids", "/rules/firewall": "firewall"}


class NotModified:
    """Answers the polls it may from the app's caches; `None` for the others."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._observe = app[METRICS].request_tally.observe
        self.answered = 0  # polls answered here, without the application

    def answer(self, message, payload, remote: str) -> bytes | None:
        """The whole 304 response to a parsed request head, or None when the application
        must answer it."""
        started = time.perf_counter()
        path = getattr(message, "path", None)  # a head aiohttp could not parse has none
        kind = PAYLOADS.get(path)
        if (kind is None or message.method != "GET" or payload is not EMPTY_PAYLOAD
                or message.should_close or message.upgrade or message.version != (1, 1)):
            return None
        found = self._current_etag(message.headers, kind)
        if found is None or not self._app[FLOOD_LIMITS].try_request(found[0]):
            return None
        head = (f'HTTP/1.1 304 Not Modified\r\nETag: {etag_header(found[1])}\r\n'
                f'Date: {rfc822_formatted_time()}\r\nServer: {SERVER_SOFTWARE}\r\n\r\n')
        elapsed = time.perf_counter() - started
        self.answered += 1
        self._observe(path, "GET", 304, elapsed)
        if access_logged():
            log_access(remote, f"GET {path} HTTP/1.1", 304, 0, elapsed, found[0])
        return head.encode()

    def _current_etag(self, headers, kind: str) -> tuple[str, str] | None:
        """(router, the payload's current ETag) when this poll may be answered 304 here."""
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
