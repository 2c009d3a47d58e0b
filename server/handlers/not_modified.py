"""The 304 fast path: nearly every rules poll is answered 304, so it is answered here, first
in the middleware chain, from memory and without an await.

A `GET /rules/ids` or `/rules/firewall` whose router this process admitted lately (and whose
key it trusts, in key mode), whose If-None-Match names the payload's current ETag as the
ETag cache knows it (server/etag_cache.py), and which is within the router's request budget,
is answered 304 here; it is counted and timed in the same metrics and logged in the access
log like any other. Anything else (a first poll, an ETag the cache does not know, a header
to refuse, a budget spent, a drain under way) goes down the whole chain, which answers as it
always did. Nothing is taken from the budget unless the answer is given here.
"""

from __future__ import annotations

import time

from aiohttp import web

from server.mac import InvalidMac, normalise_mac
from server.metrics import request_observer
from server.typedefs import (ETAG_CACHE, FLOOD_LIMITS, IN_FLIGHT, METRICS, ROUTER_KEYS,
                             ROUTER_REGISTRY, SETTINGS)

PAYLOADS = {"/rules/ids": "ids", "/rules/firewall": "firewall"}


def not_modified_middleware(app: web.Application):
    observe = request_observer(app[METRICS])

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        started = time.perf_counter()
        kind = PAYLOADS.get(request.path)
        if kind is None or request.method != "GET":
            return await handler(request)
        found = current_etag(request, kind)
        if found is None or not app[FLOOD_LIMITS].try_request(found[0]):
            return await handler(request)
        etag = found[1]
        response = web.Response(status=304, headers={"ETag": f'W/"{etag}"'})
        observe(request.path, "GET", 304, time.perf_counter() - started)
        return response

    def current_etag(request: web.Request, kind: str) -> tuple[str, str] | None:
        """(router, the payload's current ETag) when this request may be answered 304 here."""
        wanted = request.headers.get("If-None-Match")
        macs = request.headers.getall("X-ID", ())
        if wanted is None or len(macs) != 1 or app[IN_FLIGHT].draining:
            return None
        try:
            mac = normalise_mac(macs[0])
        except InvalidMac:
            return None
        if app[SETTINGS].router_auth == "key" and not app[ROUTER_KEYS].trusted(request, mac):
            return None
        if not app[ROUTER_REGISTRY].admitted(mac):
            return None
        etag = app[ETAG_CACHE].etag(mac, kind)
        if etag is None or not names(wanted, etag):
            return None
        return mac, etag

    return middleware


def names(if_none_match: str, etag: str) -> bool:
    """Whether an If-None-Match value names `etag` (weak or strong) or is `*`."""
    for tag in if_none_match.split(","):
        tag = tag.strip()
        if tag == "*" or tag.removeprefix("W/") == f'"{etag}"':
            return True
    return False
