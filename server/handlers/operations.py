"""Endpoints for operators and tools: Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

from aiohttp import web

from server.db.pool import DatabaseUnavailable
from server.errors import json_response
from server.generation import queue as generation_queue
from server.openapi import openapi_document
from server.typedefs import DATABASE, ETAG_CACHE, GENERATION, METRICS, SETTINGS


async def metrics_page(request: web.Request) -> web.Response:
    app = request.app
    metrics = app[METRICS]
    pool = app[DATABASE].pool
    metrics.db_pool.labels("open").set(pool.size)
    metrics.db_pool.labels("idle").set(pool.freesize)
    metrics.db_pool.labels("max").set(pool.maxsize)
    generation = app.get(GENERATION)
    metrics.generation_workers.set(generation.workers if generation is not None else 0)
    if (cache := app.get(ETAG_CACHE)) is not None:
        metrics.etag_cache_routers.set(len(cache))
        metrics.etag_cache_listening.set(cache.listening)
    if "router" in app[SETTINGS].services:
        try:
            for state, count in (await generation_queue.queue_state(app[DATABASE])).items():
                metrics.queue.labels(state).set(count)
        except DatabaseUnavailable:
            pass  # the request and pool figures are still worth scraping; the queue's stay stale
    return metrics.exposition()


async def openapi(request: web.Request) -> web.Response:
    return json_response(openapi_document())


def setup_routes(app: web.Application) -> None:
    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/openapi.json", openapi)
