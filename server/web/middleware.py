"""The middleware every request of the service passes through first: counted in progress
(for the drain), answered as JSON when its handler raised (server/errors.py), and counted
and timed in the request metrics. One coroutine instead of one per concern, wrapped around
each handler at start-up (server/web/routes.py): a 304 rules poll, the service's hottest
path, passes through it on every poll."""

from __future__ import annotations

import time

from aiohttp import web

from server.errors import ErrorAnswers
from server.metrics import Metrics
from server.web.in_flight import InFlight


def request_middleware(in_flight: InFlight, metrics: Metrics, errors: ErrorAnswers):
    observe = metrics.observe_request

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        in_flight.count += 1
        try:
            try:
                response = await handler(request)
            except Exception as error:
                response = errors.answer(request, error)
            status = response.status
            if in_flight.draining:
                response.force_close()  # no further request on this connection
            return response
        except web.HTTPException as error:  # a redirect or 304, raised again
            status = error.status
            raise
        finally:
            in_flight.count -= 1
            observe(request, status, time.perf_counter() - started)

    return middleware
