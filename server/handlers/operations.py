"""Endpoints for operators and tools: Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

import asyncio
from typing import Any, MutableMapping

from aiohttp import web

from engine.addresses import is_loopback
from ruledata.workspace import Workspace
from server.db.pool import DatabaseUnavailable
from server.errors import Forbidden, json_response
from server.generation import sql as generation_queue
from server.handlers.openapi import openapi_document
from server.web.peers import bearer_matches
from server.typedefs import DATABASE, ETAG_CACHE, GENERATION, METRICS, SETTINGS


# A proxy in front (Caddy) adds these; a request that carries one came from outside.
PROXY_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP")


def may_scrape(remote: str | None, headers, token: str) -> bool:
    """Metrics go to loopback clients that did not come through a proxy, or to the bearer of
    METRICS_TOKEN; nobody else (they tell an attacker what the fleet is doing)."""
    if token and bearer_matches(headers, token):
        return True
    if not remote or any(name in headers for name in PROXY_HEADERS):
        return False
    return is_loopback(remote)


async def metrics_page(request: web.Request) -> web.Response:
    app = request.app
    if not may_scrape(request.remote, request.headers, app[SETTINGS].metrics_token):
        raise Forbidden("metrics are served to loopback clients, or with METRICS_TOKEN")
    metrics = app[METRICS]
    refresh_process_gauges(app)
    if (ruleset := Workspace(app[SETTINGS].rule_data_path).current_ruleset()) is not None:
        metrics.ruleset_published.set(ruleset.published_at.timestamp())
    if "router" in app[SETTINGS].services:
        try:
            for state, count in (await generation_queue.queue_state(app[DATABASE])).items():
                metrics.queue.labels(state).set(count)
        except DatabaseUnavailable:
            pass  # the request and pool figures are still worth scraping; the queue's stay stale
    return metrics.exposition()


def refresh_process_gauges(app: MutableMapping[Any, Any]) -> None:
    """This process's own gauges: its pool, its generation workers, its ETag cache (`app`: its
    resources, an aiohttp application or the working process's dict)."""
    metrics = app[METRICS]
    opened, idle, most = app[DATABASE].connection_counts()
    metrics.db_pool.labels("open").set(opened)
    metrics.db_pool.labels("idle").set(idle)
    metrics.db_pool.labels("max").set(most)
    generation = app.get(GENERATION)
    metrics.generation_workers.set(generation.workers if generation is not None else 0)
    cache = app.get(ETAG_CACHE)
    metrics.etag_cache_routers.set(len(cache) if cache is not None else 0)
    # A process without a cache (the supervisor's background process) bypasses nothing: it
    # reports 1, so the host's minimum says whether every HTTP process's cache listens.
    metrics.etag_cache_listening.set(cache.listening if cache is not None else 1)


async def openapi(request: web.Request) -> web.Response:
    # The first document of a process takes half a second (server/text.py
    # plain_text_pattern): built in a thread, so no request waits for it.
    return json_response(await asyncio.to_thread(openapi_document))


ROUTES = [web.get("/metrics", metrics_page), web.get("/openapi.json", openapi)]
