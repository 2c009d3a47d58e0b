"""What a generation worker process runs for one router, database work included: renew the
lease and read the telemetry summary, generate (the pure engine), store payloads and the new
due time. Only a small summary goes back to the server process.

Each worker keeps one psycopg2 connection, reopened after a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import psycopg2

from engine.generate import Limits
from engine.worker import GenerationJob, generate_for_router
from server.db import generation as queue_db
from server.db.pool import DatabaseUnavailable

_connection = None


@dataclass(frozen=True)
class RouterTask:
    dsn: str
    me: str
    mac: str
    version_dir: str
    rules_file: str
    lease: timedelta
    window: timedelta
    block_severity: int
    interval: timedelta
    limits: Limits


@dataclass(frozen=True)
class RouterGenerated:
    mac: str
    version: str
    stats: dict
    seconds: float


def _connect(dsn: str):
    global _connection
    if _connection is None or _connection.closed:
        _connection = psycopg2.connect(dsn, connect_timeout=10)
        _connection.autocommit = True
    return _connection


def generate_and_store(task: RouterTask) -> RouterGenerated:
    global _connection
    try:
        conn = _connect(task.dsn)
        with conn.cursor() as cur:
            summary = queue_db.renew_and_summarise(cur, task.me, task.mac, task.lease,
                                                   task.window, task.block_severity)
        result = generate_for_router(GenerationJob(task.mac, task.version_dir, task.rules_file,
                                                   summary, task.limits))
        with conn.cursor() as cur:
            queue_db.complete(cur, task.me, task.mac,
                              {"ids": (result.ids_gz, result.ids_etag),
                               "firewall": (result.firewall_gz, result.firewall_etag)},
                              task.interval, result.seconds)
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as error:
        if _connection is not None:
            _connection.close()
        raise DatabaseUnavailable(str(error).strip().splitlines()[0]) from None
    return RouterGenerated(task.mac, result.version, result.stats, result.seconds)
