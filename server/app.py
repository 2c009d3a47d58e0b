"""The application factory: settings and parts in, a ready aiohttp application out for a
process that serves; for one that serves nothing, its resources and cleanup contexts alone
(`resources`, `contexts`), run without an aiohttp application (server/process/shutdown.py
run_until_stopped)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, MutableMapping

from aiohttp import web

from server.web.access_log import quiet_refused_heads
from server.console.app import create_console_app
from server.console.hunting import HUNTS_AT_ONCE
from server.changes import ChangeFeed
from server.db.channels import FLEET_LIST as FLEET_LIST_CHANNEL
from server.db.channels import INTEL_LIST as INTEL_LIST_CHANNEL
from server.db.channels import ROUTER_KEYS as ROUTER_KEYS_CHANNEL
from server.db.lifecycle import open_database
from server.exposure import chosen_risks
from server.db.pool import Database
from server.errors import ErrorAnswers
from server.polling.etag_cache import EtagCache
from server.fleet.document import FleetList, FleetLists
from server.generation.declarations import Declarations
from server.intel.document import DeliveredRows, IntelList, IntelLists
from server.generation.service import GenerationConfig, GenerationService, generation_pool
from server.handlers.domain_errors import DOMAIN_STATUSES
from server.handlers.notifications import create_notifications_app
from server.hunt.config import HuntConfig
from server.hunt.indexer import HuntIndexer
from server.handlers import operations, router_api
from server.handlers.operations import refresh_process_gauges
from server.routers.identity import RouterRegistry
from server.ingest.ingest import IngestConfig, Ingestion
from server.ingest.turns import SPARE_CONNECTIONS
from server.ingest.slots import UploadSlots
from server.ingest.tally import TrafficTally
from server.web.host_buckets import map_table_file
from server.web.limits import HOST_TABLES, FloodLimits
from server.intel.jobs import intel_jobs
from server.reports.jobs import report_jobs
from server.enforcement.jobs import enforcement_jobs
from server.feedback.jobs import feedback_jobs
from server.jobs import MOST_JOBS
from server.fleet.config import FleetConfig
from server.jobs.schedule import scheduled_jobs
from server.metrics import Metrics
from server.notify.mailer import make_mailer
from server.notify.sends import Sends
from server.notify.service import Delivery, Notifier
from server.routers.keys import RouterKeys
from server.routers.registration import Registrations
from server.settings import Settings
from server.web.in_flight import InFlight
from server.web.middleware import request_middleware
from server.web.routes import add_routes
from server.typedefs import (DATABASE, ETAG_CACHE, FLEET_LIST, INTEL_LIST, FLOOD_LIMITS, GENERATION,
                             DECLARATIONS, IN_FLIGHT, INGESTION, METRICS, NOTIFIER, PARTS, ROUTER_KEYS,
                             ROUTER_REGISTRY, SENDS, SETTINGS, TRAFFIC_TALLY, UPLOAD_SLOTS)

log = logging.getLogger("router_backend.http")

# Telemetry bodies are streamed, never read whole; this caps the few bodies that are.
CLIENT_MAX_SIZE = 1024 * 1024


GAUGE_REFRESH_SECONDS = 5


# What a process's parts hold, by the typed keys of server/typedefs.py: the aiohttp
# application of a process that serves, a plain dict of one that serves nothing.
Resources = MutableMapping[Any, Any]
Context = Callable[[Any], AsyncIterator[None]]


@dataclass(frozen=True)
class Part:
    """One part of what a process does, as data: whether it serves HTTP, the cleanup
    contexts it adds with the router service (in order), whether it sends the notification
    retries, and the database connections it holds at most beside the process's own pool
    (DB_POOL_MAX): a host's total is summed from its processes' parts."""
    name: str
    serves: bool
    router_contexts: tuple[Context, ...]
    retries: bool
    connections: Callable[[Settings], int]


def create_app(settings: Settings, parts: tuple[Part, ...] | None = None,
               metrics_dir: str | None = None, migrate: bool = True,
               host_tables: str | None = None) -> web.Application:
    """The process's application: its `parts` (by default EVERYTHING, HTTP_WORKERS=1) in
    order; `metrics_dir`: the supervisor's multiprocess metrics directory
    (server/metrics.py); `migrate`: a lone process migrates, the supervisor's children find
    the schema it prepared; `host_tables`: the supervisor's file of the flood limits its HTTP
    workers share (server/web/host_buckets.py), else this process counts its own."""
    parts = EVERYTHING if parts is None else parts
    serves = any(part.serves for part in parts)
    if serves:
        for risk in chosen_risks(settings):
            log.warning("%s", risk)
        quiet_refused_heads()
    app = web.Application(client_max_size=CLIENT_MAX_SIZE,
                          # Bodies are decoded by server/ingest/body.py, which caps the output.
                          handler_args={"auto_decompress": False})
    app.update(resources(settings, parts, metrics_dir))
    metrics = app[METRICS]
    in_flight = app[IN_FLIGHT] = InFlight()
    errors = ErrorAnswers(settings.db_retry_after_seconds, domain=DOMAIN_STATUSES)
    outer = request_middleware(in_flight, metrics, errors,
                               settings.too_many_requests_delay_seconds)
    app.cleanup_ctx.extend(contexts(settings, parts, metrics_dir, migrate))
    if serves:
        metrics.http_workers.set(1)
        app[FLOOD_LIMITS] = FloodLimits(settings.router_requests_per_minute,
                                        settings.router_records_per_minute,
                                        metrics,
                                        settings.failed_credentials_per_minute_per_address,
                                        settings.ipv6_limit_prefix,
                                        map_table_file(Path(host_tables), HOST_TABLES)
                                        if host_tables else None)
        if settings.console:
            app.add_subapp("/console/", create_console_app(settings, outer))
        if "notifications" in settings.services:
            app.add_subapp("/api/", create_notifications_app(settings, outer))
        add_routes(app, [*operations.ROUTES,
                         *(router_api.ROUTES if "router" in settings.services else ())], outer)
    return app


def resources(settings: Settings, parts: tuple[Part, ...], metrics_dir: str | None
              ) -> dict[Any, Any]:
    """What every process starts with, before its contexts add theirs."""
    return {SETTINGS: settings, METRICS: Metrics(metrics_dir), PARTS: parts}


def contexts(settings: Settings, parts: tuple[Part, ...], metrics_dir: str | None,
             migrate: bool) -> list[Context]:
    """The cleanup contexts of a process of these parts, in the order they start (and stop
    in reverse): the database, each part's router contexts, the notifier, the gauges."""
    started: list[Context] = [functools.partial(database_context, migrate=migrate)]
    if "router" in settings.services:
        for part in parts:
            started.extend(part.router_contexts)
    if "notifications" in settings.services:
        started.append(notifications_context)
    if metrics_dir:
        started.append(gauge_refresh_context)
    return started


async def database_context(app: Resources, migrate: bool) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    async with open_database(settings, migrate=migrate) as database:
        app[DATABASE] = database
        yield


async def ingest_database_context(app: Resources) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    app[UPLOAD_SLOTS] = UploadSlots(settings.ingest_max_uploads_per_router,
                                    settings.ingest_max_uploads_per_address)
    database = await Database.open(app[DATABASE].location, 0,
                                   settings.ingest_db_pool_max + SPARE_CONNECTIONS,
                                   settings.db_timeout_seconds)
    app[INGESTION] = Ingestion(database, app[FLOOD_LIMITS], IngestConfig.from_settings(settings))
    try:
        yield
    finally:
        await database.close()


@contextlib.asynccontextmanager
async def _running(service: Any) -> AsyncIterator[None]:
    """A service's loop started for as long as the process runs, then stopped."""
    service.start()
    try:
        yield
    finally:
        await service.stop()


async def traffic_tally_context(app: Resources) -> AsyncIterator[None]:
    tally = TrafficTally(app[DATABASE], app[METRICS])
    app[TRAFFIC_TALLY] = tally
    async with _running(tally):
        yield


async def change_feed_context(app: Resources) -> AsyncIterator[None]:
    """The change feed (server/changes.py) and what follows it: the ETag cache, router keys
    rotated or revoked elsewhere (and the routers removed, admitted and declared), the
    fleet's and the threat intelligence documents."""
    settings = app[SETTINGS]
    feed = ChangeFeed(app[DATABASE], settings.db_timeout_seconds, app[METRICS])
    app[ETAG_CACHE] = EtagCache(feed)
    for knows_routers in (app[ROUTER_KEYS], app[ROUTER_REGISTRY], app[DECLARATIONS]):
        feed.follow(ROUTER_KEYS_CHANNEL, knows_routers.forget, knows_routers.forget_all)
    listening = lambda: feed.listening  # noqa: E731
    fleet = app[FLEET_LIST] = FleetLists(lambda entries: FleetList(
        app[DATABASE], listening, app[METRICS], settings.fleet_enabled, entries),
        settings.fleet_max_entries)
    fleet_config = FleetConfig.from_settings(settings)
    delivered = DeliveredRows(app[DATABASE], list(fleet_config.service_networks),
                              fleet_config.min_age, fleet_config.keyed)
    intel = app[INTEL_LIST] = IntelLists(lambda capacity: IntelList(
        app[DATABASE], listening, delivered, capacity), settings.intel_max_entries, delivered)
    for document in (fleet, intel):  # the allowlist is in both
        feed.follow(FLEET_LIST_CHANNEL, document.changed, document.changed)
    feed.follow(INTEL_LIST_CHANNEL, intel.changed, intel.changed)
    async with _running(feed):
        yield


async def generation_context(app: Resources) -> AsyncIterator[None]:
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


async def registry_context(app: Resources) -> AsyncIterator[None]:
    """Router keys and registrations. A new router wakes the generation queue when this
    process runs it; an HTTP worker's new routers are found by the queue's next poll
    (RULE_GENERATION_POLL_SECONDS)."""
    settings = app[SETTINGS]
    service = app.get(GENERATION)
    registrations = Registrations(app[DATABASE], settings.registrations_per_minute_per_address,
                                  app[METRICS])
    app[ROUTER_KEYS] = RouterKeys(app[DATABASE], settings.router_cache_seconds, app[METRICS],
                                  app[FLOOD_LIMITS], registrations)
    app[ROUTER_REGISTRY] = RouterRegistry(
        app[DATABASE], settings.registration_mode, settings.router_cache_seconds,
        app[FLOOD_LIMITS], registrations, on_new_router=service.wake if service else lambda: None)
    app[DECLARATIONS] = Declarations()
    yield


async def notifications_context(app: Resources) -> AsyncIterator[None]:
    """The notifier for the send endpoints. Its loop delivers retries once per host (not in
    the supervisor's HTTP workers); in every process it records the outcomes of deliveries
    made while the database was away."""
    notifier = Notifier(app[DATABASE], make_mailer(app[SETTINGS]),
                        Delivery.from_settings(app[SETTINGS]), app[METRICS])
    app[NOTIFIER] = notifier
    app[SENDS] = Sends.from_settings(app[DATABASE], notifier, app[SETTINGS])
    notifier.start(retries=any(part.retries for part in app[PARTS]))
    try:
        yield
    finally:
        await notifier.stop()


async def gauge_refresh_context(app: Resources) -> AsyncIterator[None]:
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


async def jobs_context(app: Resources) -> AsyncIterator[None]:
    """The scheduled jobs and the hunt indexer's loop."""
    settings = app[SETTINGS]
    jobs = scheduled_jobs(app[DATABASE], settings, app[METRICS],
                          intel_jobs(app[DATABASE], settings)
                          + report_jobs(app[DATABASE], settings)
                          + feedback_jobs(app[DATABASE], settings)
                          + enforcement_jobs(app[DATABASE], settings, app[METRICS]))
    indexer = HuntIndexer(app[DATABASE], HuntConfig.from_settings(settings),
                          settings.hunt_index_seconds, app[METRICS])
    try:
        async with _running(indexer):
            yield
    finally:
        await jobs.stop()


# The parts (above). WORKING first: the registry of SERVING wakes the generation queue when
# the same process runs it.
WORKING = Part("working", serves=False, router_contexts=(generation_context, jobs_context),
               retries=True,
               # generation workers' connections, each running job's lock, and the sessions
               # some jobs hold beside it (the hunt index's packing, the retro-hunt's lock, the
               # live match's indexing), the hunt indexer's lanes (server/hunt/indexer.py) and
               # the retro-hunt's reading processes (server/hunt/tallies.py)
               connections=lambda s: (s.rule_generation_max_concurrent + MOST_JOBS + 3
                                      + s.hunt_index_lanes + s.intel_retro_hunt_processes))
SERVING = Part("serving", serves=True,
               router_contexts=(ingest_database_context, traffic_tally_context,
                                registry_context, change_feed_context),
               retries=False,
               # the ingestion pool (and its spare), the change feed's LISTEN, the console's
               # hunts' indexing
               connections=lambda s: (s.ingest_db_pool_max + SPARE_CONNECTIONS + 1
                                      + HUNTS_AT_ONCE))
EVERYTHING = (WORKING, SERVING)


def connections_needed(settings: Settings, parts: tuple[Part, ...]) -> int:
    """The most connections one process of these parts opens."""
    return settings.db_pool_max + sum(part.connections(settings) for part in parts)
