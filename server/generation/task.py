"""What a generation worker process runs for one router, database work included: renew the
lease and read the telemetry summary, generate (engine.worker), store both payloads with
the next due time (one transaction; the statements are server/db/generation.py's). Only a small summary goes back to the event
loop, so the database work scales with the workers instead of queueing in the server process.

Synchronous (psycopg2): it runs in the worker process, which keeps one connection of its own.
Each wait on that connection is bounded by the task's `db_timeout` (a wait callback), so a
network cut between worker and database fails the generation within that time, like any
statement of the event loop, instead of blocking the worker until the command timeout.
"""

from __future__ import annotations

import select
import time
from dataclasses import dataclass
from datetime import timedelta

import psycopg2
import psycopg2.extensions

from engine.generate import PayloadLimits
from engine.worker import GenerationJob, generate_for_router
from server.db.generation import complete, renew_and_summarise
from server.db.pool import DatabaseUnavailable


@dataclass(frozen=True)
class RouterTask:
    dsn: str
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
    """This worker process's connection: opened on first use, reopened after a failure."""

    def __init__(self) -> None:
        self._conn = None
        self.timeout = 30.0

    def get(self, dsn: str, timeout: float):
        self.timeout = timeout
        psycopg2.extensions.set_wait_callback(self._wait)
        if self._conn is None or self._conn.closed:
            self._conn = psycopg2.connect(dsn, connect_timeout=max(1, round(timeout)))
            self._conn.autocommit = True
        return self._conn

    def _wait(self, conn) -> None:
        """psycopg2's wait callback (its `wait_select`, with a deadline)."""
        deadline = time.monotonic() + self.timeout
        while (state := conn.poll()) != psycopg2.extensions.POLL_OK:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise psycopg2.OperationalError(
                    f"no answer from the database in {self.timeout:g}s")
            if state == psycopg2.extensions.POLL_READ:
                select.select([conn.fileno()], [], [], remaining)
            else:
                select.select([], [conn.fileno()], [], remaining)

    def discard(self) -> None:
        if self._conn is not None:
            self._conn.close()


_CONNECTION = _WorkerConnection()


def generate_and_store(task: RouterTask) -> RouterGenerated:
    """The function the generation pool runs. LeaseLost when our lease ran out;
    DatabaseUnavailable when the database cannot be reached."""
    try:
        conn = _CONNECTION.get(task.dsn, task.db_timeout)
        with conn.cursor() as cur:
            summary = renew_and_summarise(cur, task.owner, task.mac, task.lease, task.window,
                                          task.block_severity)
        result = generate_for_router(GenerationJob(task.mac, task.version_dir, task.rules_file,
                                                   summary, task.limits))
        with conn.cursor() as cur:
            complete(cur, task.owner, task.mac, task.interval,
                     {"ids": (result.ids_gz, result.ids_etag),
                      "firewall": (result.firewall_gz, result.firewall_etag)}, result.seconds)
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as error:
        _CONNECTION.discard()
        raise DatabaseUnavailable(str(error).strip().splitlines()[0]) from None
    return RouterGenerated(task.mac, result.version, result.stats, result.seconds)
