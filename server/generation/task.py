"""What a generation worker process runs for one router, database work included: renew the
lease and read the telemetry summary, generate (engine.worker), store both payloads with
the next due time (one transaction; the statements are server/generation/sql.py's). Only a small summary goes back to the event
loop, so the database work scales with the workers instead of queueing in the server process.

The worker process keeps one connection of its own and an event loop to run it: each step
(renew and read; store) is bounded by the task's `db_timeout`, so a network cut between
worker and database fails the generation within that time, like any statement of the
service's event loop, instead of blocking the worker until the command timeout.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

import psycopg

from engine.generate import PayloadLimits
from engine.worker import GenerationJob, generate_for_router
from server.generation.sql import complete, renew_and_summarise
from server.db.connect import connect_async
from server.db.location import DatabaseLocation
from server.db.pool import CONNECTIVITY_ERRORS, DatabaseUnavailable


@dataclass(frozen=True)
class RouterTask:
    location: DatabaseLocation
    owner: str                # the lease owner
    mac: str
    version_dir: str          # the published ruleset to use (resolved `current`)
    rules_file: str           # where to write the router's .rules file
    lease: timedelta
    window: timedelta         # telemetry that shapes the rules
    block_severity: int
    interval: timedelta       # until the router is due again
    limits: PayloadLimits
    db_timeout: float         # longest wait for the database (connect or one statement)


@dataclass(frozen=True)
class RouterGenerated:
    mac: str
    version: str
    stats: dict
    seconds: float


class _WorkerConnection:
    """This worker process's connection and the event loop it runs on, both kept between
    tasks: opened on first use, reopened after a failure."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: psycopg.AsyncConnection | None = None

    def run(self, location: DatabaseLocation, timeout: float, step):
        """`step(cursor)`, a coroutine function, within `timeout` seconds."""
        async def bounded():
            if self._conn is None or self._conn.closed:
                self._conn = await connect_async(location, timeout)
            async with psycopg.AsyncCursor(self._conn) as cur:  # parameters bound on the server
                return await step(cur)
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(asyncio.wait_for(bounded(), timeout))

    def discard(self) -> None:
        if self._conn is not None and self._loop is not None:
            self._loop.run_until_complete(self._conn.close())
            self._conn = None


_CONNECTION = _WorkerConnection()


def generate_and_store(task: RouterTask) -> RouterGenerated:
    """The function the generation pool runs. LeaseLost when our lease ran out;
    DatabaseUnavailable when the database cannot be reached."""
    try:
        summary = _CONNECTION.run(task.location, task.db_timeout, lambda cur: renew_and_summarise(
            cur, task.owner, task.mac, task.lease, task.window, task.block_severity))
        result = generate_for_router(GenerationJob(task.mac, task.version_dir, task.rules_file,
                                                   summary, task.limits))
        _CONNECTION.run(task.location, task.db_timeout, lambda cur: complete(
            cur, task.owner, task.mac, task.interval,
            {"ids": (result.ids_gz, result.ids_etag),
             "firewall": (result.firewall_gz, result.firewall_etag)}, result.seconds,
            summary.holds))
    except CONNECTIVITY_ERRORS as error:
        _CONNECTION.discard()
        raise DatabaseUnavailable(str(error).strip().splitlines()[0]
                                  if str(error).strip() else type(error).__name__) from None
    return RouterGenerated(task.mac, result.version, result.stats, result.seconds)
