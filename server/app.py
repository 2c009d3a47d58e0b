"""The application factory: settings in, a ready aiohttp application out."""

from __future__ import annotations

from typing import AsyncIterator

from aiohttp import web

from ruledata.preprocess import run_preprocess
from server.db.lifecycle import open_database
from server.errors import error_middleware
from server.handlers.router_api import setup_routes
from server.identity import RouterRegistry
from server.jobs import CronJobs
from server.settings import Settings
from server.typedefs import DATABASE, ROUTER_REGISTRY, SETTINGS

# Telemetry bodies are streamed, never read whole; this caps the few bodies that are.
CLIENT_MAX_SIZE = 1024 * 1024


def create_app(settings: Settings) -> web.Application:
    app = web.Application(middlewares=[error_middleware(settings.db_retry_after_seconds)],
                          client_max_size=CLIENT_MAX_SIZE,
                          # Bodies are decoded by server/ingest/body.py, which caps the output.
                          handler_args={"auto_decompress": False})
    app[SETTINGS] = settings
    app.cleanup_ctx.append(database_context)
    app.cleanup_ctx.append(jobs_context)
    setup_routes(app)
    return app


async def database_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    async with open_database(settings) as database:
        app[DATABASE] = database
        app[ROUTER_REGISTRY] = RouterRegistry(database, settings.registration_mode,
                                              settings.router_cache_seconds)
        yield


async def jobs_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    jobs = CronJobs(app[DATABASE], settings.job_retry_delay_seconds, settings.job_retry_attempts)

    async def rule_preprocess() -> dict:
        return (await run_preprocess(settings, start_method="spawn")).as_detail()

    jobs.add("rulepreprocess", settings.rule_preprocess_cron_schedule, rule_preprocess)
    try:
        yield
    finally:
        await jobs.stop()
