"""The application factory: settings in, a ready aiohttp application out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterator

from aiohttp import web

from server.web.access_log import quiet_refused_heads
from server.console.app import create_console_app
from server.changes import ChangeFeed
from server.db.channels import FLEET_LIST as FLEET_LIST_CHANNEL
from server.db.channels import INTEL_LIST as INTEL_LIST_CHANNEL
from server.db.channels import ROUTER_KEYS as ROUTER_KEYS_CHANNEL
from server.db.lifecycle import open_database
from server.exposure import chosen_risks
from server.db.pool import Database
from server.errors import ErrorAnswers
from server.polling.etag_cache import EtagCache
from server.polling.fleet_list import FleetList
from server.polling.intel_list import IntelList
from server.generation.service import GenerationConfig, GenerationService, generation_pool
from server.handlers.notifications import create_notifications_app
from server.hunt.indexer import HuntIndexer
from server.handlers import operations, router_api
from server.handlers.operations import refresh_process_gauges
from server.routers.identity import RouterRegistry
from server.ingest.ingest import Ingestion
from server.ingest.slots import UploadSlots
from server.ingest.tally import TrafficTally
from server.web.limits import FloodLimits
from server.intel.jobs import intel_jobs
from server.jobs.fleet import service_networks
from server.jobs.schedule import scheduled_jobs
from server.metrics import Metrics
from server.notify.mailer import make_mailer
from server.notify.sends import Sends
from server.notify.service import Notifier
from server.routers.keys import RouterKeys
from server.settings import Settings
from server.web.in_flight import InFlight
from server.web.middleware import request_middleware
from server.web.routes import add_routes
from server.typedefs import (DATABASE, ETAG_CACHE, FLEET_LIST, INTEL_LIST, FLOOD_LIMITS, GENERATION,
                             IN_FLIGHT, INGESTION, METRICS, NOTIFIER, ROLE, ROUTER_KEYS,
                             ROUTER_REGISTRY, SENDS, SETTINGS, TRAFFIC_TALLY, UPLOAD_SLOTS)

log = logging.getLogger("router_backend.http")

# Telemetry bodies are streamed, never read whole; this caps the few bodies that are.
CLIENT_MAX_SIZE = 1024 * 1024


# What one process does. `all`: everything (HTTP_WORKERS=1). Under the supervisor
# (server/process/supervisor.py): `http`, one of the HTTP workers (requests only), and `background`,
# the host's one process for the generation queue, scheduled jobs and notification retries.
ROLES = ("all", "http", "background")
GAUGE_REFRESH_SECONDS = 5


def create_app(settings: Settings, role: str = "all",
               metrics_dir: str | None = None) -> web.Application:
    """`metrics_dir`: the supervisor's multiprocess metrics directory (server/metrics.py)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    if role != "background":
        for risk in chosen_risks(settings):
            log.warning("%s", risk)
        quiet_refused_heads()
    metrics, in_flight = Metrics(metrics_dir), InFlight()
    errors = ErrorAnswers(settings.db_retry_after_seconds)
    outer = request_middleware(in_flight, metrics, errors)
    app = web.Application(client_max_size=CLIENT_MAX_SIZE,
                          # Bodies are decoded by server/ingest/body.py, which caps the output.
                          handler_args={"auto_decompress": False})
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[IN_FLIGHT] = in_flight
    app[ROLE] = role
    app.cleanup_ctx.append(database_context)
    if role != "background":
        metrics.http_workers.set(1)
        app[FLOOD_LIMITS] = FloodLimits(settings.router_requests_per_minute,
                                        settings.router_records_per_minute,
                                        settings.registrations_per_minute_per_address, metrics,
                                        settings.failed_credentials_per_minute_per_address,
                                        settings.ipv6_limit_prefix)
        if settings.console:
            app.add_subapp("/console/", create_console_app(settings, outer))
    if "router" in settings.services:
        add_router_service(app)
    if "notifications" in settings.services:
        app.cleanup_ctx.append(notifications_context)
        if role != "background":
            app.add_subapp("/api/", create_notifications_app(settings, outer))
    if role != "background":
        add_routes(app, operations.ROUTES
                   + (router_api.ROUTES if "router" in settings.services else []), outer)
    if metrics_dir:
        app.cleanup_ctx.append(gauge_refresh_context)
    return app


def add_router_service(app: web.Application) -> None:
    settings = app[SETTINGS]
    if app[ROLE] != "http":  # first: the registry wakes the queue this process runs
        app.cleanup_ctx.append(generation_context)
        app.cleanup_ctx.append(jobs_context)
    if app[ROLE] != "background":
        app[UPLOAD_SLOTS] = UploadSlots(settings.ingest_max_uploads_per_router,
                                        settings.ingest_max_uploads_per_address)
        app.cleanup_ctx.append(ingest_database_context)
        app.cleanup_ctx.append(traffic_tally_context)
        app.cleanup_ctx.append(registry_context)
        app.cleanup_ctx.append(change_feed_context)


async def database_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    # A lone process migrates; the supervisor's children find the schema it prepared.
    async with open_database(settings, migrate=app[ROLE] == "all") as database:
        app[DATABASE] = database
        yield


async def ingest_database_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    database = await Database.open(app[DATABASE].location, 0, settings.ingest_db_pool_max,
                                   settings.db_timeout_seconds)
    app[INGESTION] = Ingestion(database, app[FLOOD_LIMITS], settings)
    try:
        yield
    finally:
        await database.close()


async def traffic_tally_context(app: web.Application) -> AsyncIterator[None]:
    tally = TrafficTally(app[DATABASE], app[METRICS])
    app[TRAFFIC_TALLY] = tally
    tally.start()
    try:
        yield
    finally:
        await tally.stop()


async def change_feed_context(app: web.Application) -> AsyncIterator[None]:
    """The change feed (server/changes.py) and what follows it: the ETag cache, router keys
    rotated or revoked elsewhere, the fleet's and the threat intelligence documents."""
    settings = app[SETTINGS]
    feed = ChangeFeed(app[DATABASE], settings.db_timeout_seconds, app[METRICS])
    app[ETAG_CACHE] = EtagCache(feed)
    keys = app[ROUTER_KEYS]
    feed.follow(ROUTER_KEYS_CHANNEL, keys.forget, keys.forget_all)
    listening = lambda: feed.listening  # noqa: E731
    fleet = app[FLEET_LIST] = FleetList(app[DATABASE], listening, app[METRICS],
                                        settings.fleet_enabled)
    intel = app[INTEL_LIST] = IntelList(app[DATABASE], listening, service_networks(settings),
                                        settings.intel_max_entries)
    for document in (fleet, intel):  # the allowlist is in both
        feed.follow(FLEET_LIST_CHANNEL, document.changed, document.changed)
    feed.follow(INTEL_LIST_CHANNEL, intel.changed, intel.changed)
    feed.start()
    try:
        yield
    finally:
        await feed.stop()


async def generation_context(app: web.Application) -> AsyncIterator[None]:
    """The generation queue and its process pool, when this process generates."""
    settings = app[SETTINGS]
    if not settings.rule_generation_enabled:
        yield
        return
    pool = generation_pool(settings.rule_generation_max_concurrent,
                           settings.rule_generation_command_timeout_seconds)
    service = GenerationService(app[DATABASE], pool, GenerationConfig.from_settings(settings),
                                app[METRICS])
    app[GENERATION] = service
    service.start()
    try:
        yield
    finally:
        finished = await service.stop(settings.shutdown_grace_seconds)
        pool.close(wait=finished)


async def registry_context(app: web.Application) -> AsyncIterator[None]:
    """Router keys and registrations. A new router wakes the generation queue when this
    process runs it; an HTTP worker's new routers are found by the queue's next poll
    (RULE_GENERATION_POLL_SECONDS)."""
    settings = app[SETTINGS]
    service = app.get(GENERATION)
    app[ROUTER_KEYS] = RouterKeys(app[DATABASE], settings.router_cache_seconds, app[METRICS],
                                  app[FLOOD_LIMITS])
    app[ROUTER_REGISTRY] = RouterRegistry(
        app[DATABASE], settings.registration_mode, settings.router_cache_seconds,
        app[FLOOD_LIMITS], on_new_router=service.wake if service else lambda: None)
    yield


async def notifications_context(app: web.Application) -> AsyncIterator[None]:
    """The notifier for the send endpoints. Its loop delivers retries once per host (not in
    the supervisor's HTTP workers); in every process it records the outcomes of deliveries
    made while the database was away."""
    notifier = Notifier(app[DATABASE], make_mailer(app[SETTINGS]), app[SETTINGS],
                        app[METRICS])
    app[NOTIFIER] = notifier
    app[SENDS] = Sends.from_settings(app[DATABASE], notifier, app[SETTINGS])
    notifier.start(retries=app[ROLE] != "http")
    try:
        yield
    finally:
        await notifier.stop()


async def gauge_refresh_context(app: web.Application) -> AsyncIterator[None]:
    """Under the supervisor a scrape is answered by one process: every process refreshes its
    own gauges (pools, caches, workers) for the others to report."""
    async def refresh() -> None:
        while True:
            refresh_process_gauges(app)
            await asyncio.sleep(GAUGE_REFRESH_SECONDS)

    task = asyncio.create_task(refresh(), name="gauge-refresh")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def jobs_context(app: web.Application) -> AsyncIterator[None]:
    """The scheduled jobs and the hunt indexer's loop."""
    settings = app[SETTINGS]
    jobs = scheduled_jobs(app[DATABASE], settings, app[METRICS],
                          intel_jobs(app[DATABASE], settings))
    indexer = HuntIndexer(app[DATABASE], settings.hunt_postings_per_router_day,
                          settings.hunt_index_seconds, app[METRICS])
    indexer.start()
    try:
        yield
    finally:
        await indexer.stop()
        await jobs.stop()
