"""Graceful shutdown: on SIGTERM, stop listening, let requests in progress finish (their bodies
still being read), then stop the app (generations, jobs, pools).

aiohttp's own shutdown stops reading from connections as soon as it starts, so a request
whose body is still arriving would hang until the timeout and be cut off; hence the drain
comes first, while the connections are still read normally.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, MutableMapping

from aiohttp import web

from server.logs import flush_logs
from server.web.access_log import access_logger_for
from server.web.access_log import flush as flush_access_log
from server.web.connections import (ConnectionBound, listening_sockets, most_connections,
                                    serve)
from server.web.in_flight import InFlight
from server.typedefs import METRICS, SETTINGS

log = logging.getLogger("router_backend.http")

# The cyclic garbage collector's generation thresholds while serving (Python's: 700, 10,
# 10). A request allocates enough containers that the default ran a collection every few
# requests: the 304 path was 7 to 9.5 % faster with these in four of five paired wrk runs
# against the same code with the defaults (even in the fifth), peak RSS unchanged (72 MiB);
# objects without cycles are freed at once either way.
GC_THRESHOLDS = (50_000, 50, 50)


@dataclass
class Inherited:
    """Listening sockets a supervisor's HTTP worker was handed (server/process/supervisor.py)."""
    api: list[socket.socket]
    console: list[socket.socket]

    @classmethod
    def from_fds(cls, api_fds: str, console_fds: str) -> Inherited:
        def sockets(fds: str) -> list[socket.socket]:
            return [socket.socket(fileno=int(fd)) for fd in fds.split(",") if fd]
        return cls(sockets(api_fds), sockets(console_fds))


async def serve_until_stopped(app: web.Application, in_flight: InFlight, host: str, port: int,
                              grace_seconds: float, idle_timeout: float,
                              inherited: Inherited | None = None,
                              database_connections: int = 0) -> None:
    """`idle_timeout`: aiohttp's keep-alive timer, which runs from connecting and from each
    response until a complete request head has arrived, so it also cuts off clients that send
    their headers a line at a time. `inherited`: the listening sockets of this HTTP worker's
    slot, which the supervisor holds (server/process/supervisor.py), instead of listening on
    `host`:`port`. The client connections held are bounded (server/web/connections.py),
    leaving room for the process's `database_connections`."""
    settings = app[SETTINGS]
    access_logger = access_logger_for(settings.trusted_proxies)
    runner = web.AppRunner(app, access_log_class=access_logger,
                           shutdown_timeout=grace_seconds, handle_signals=False,
                           keepalive_timeout=idle_timeout)
    try:
        await runner.setup()  # inside: a failed start-up still closes what it opened
        gc.set_threshold(*GC_THRESHOLDS)
        console = settings.console_listen if settings.console else None
        if inherited is not None:
            sockets = inherited.api + inherited.console
        else:
            sockets = listening_sockets(host, port)
            if console is not None:  # the console's own listener (CONSOLE_LISTEN)
                sockets += listening_sockets(*console)
        bound = ConnectionBound(runner.server, most_connections(
            settings.http_max_connections, database_connections), in_flight.answering)
        # Before listening: a SIGTERM that comes once a client may see the port stops the
        # process in order, never by the default action (killed, nothing logged or drained).
        stopping = stop_requested()
        listeners = await serve(bound, sockets)
        log.info("serving on %s:%s (pid %d), holding at most %d connections", host, port,
                 os.getpid(), bound.most)
        if console is not None:
            log.info("console on %s:%s (pid %d)", *console, os.getpid())
        await stopping.wait()
        log.info("stopping: refusing new connections, finishing %d requests in progress",
                 in_flight.count)
        for listener in listeners:
            listener.close()
        if not await in_flight.drain(grace_seconds):
            log.warning("%d requests still in progress after %ss; cutting them off",
                        in_flight.count, grace_seconds)
    finally:
        await runner.cleanup()
        app[METRICS].record_requests()  # (under the supervisor, for the host's next scrape)
        flush_access_log()
        flush_logs()


async def run_until_stopped(resources: MutableMapping[Any, Any],
                            contexts: list[Callable[[Any], AsyncIterator[None]]],
                            started: Callable[[], Awaitable[None]]) -> None:
    """A process that serves nothing (the supervisor's working process): its contexts
    entered in order over its `resources` (a failed start leaves those entered), `started`
    once all are, then until SIGTERM; they stop in reverse order, as in a single process.
    No aiohttp application: nothing here is served."""
    async with contextlib.AsyncExitStack() as stack:
        for context in contexts:
            await stack.enter_async_context(contextlib.asynccontextmanager(context)(resources))
        await started()
        log.info("background services running (pid %d)", os.getpid())
        await stop_requested().wait()
        log.info("stopping background services")


def stop_requested() -> asyncio.Event:
    """An event set at the first SIGTERM or SIGINT from now on."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop
