"""The middleware every request of the service passes through first: counted in progress
(for the drain), answered as JSON when its handler raised (server/errors.py), and counted
and timed in the request metrics. One coroutine instead of one per concern, wrapped around
each handler at start-up (server/web/routes.py): a 304 rules poll, the service's hottest
path, passes through it on every poll.

A 429 is sent TOO_MANY_REQUESTS_DELAY_SECONDS late (RefusalDelay), after its handler has
let go of everything it held: a flooder that ignores Retry-After and sends again at once on
its connection got thousands of refusals a second, each a parse and a body read, and held a
2-core host's cores with them (bench/hunt_flood.py, 100 flooders past their first
minute: 7,300 refusals a second, an honest router's upload 3.9 times its quiet time; with
the delay 67 a second, and 1.3 times). The request's time in the metrics leaves the delay
out."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from server.errors import ErrorAnswers
from server.metrics import Metrics
from server.web.in_flight import InFlight

# A waiting refusal holds its connection and request, about 22 KB (4,000 took a worker from
# 75 to 162 MiB): 5,000 bound it near 110 MiB a process, and hold the red team's 4,000
# connections of one address (two workers) waiting rather than refused again at once and
# reconnecting (1,000: 4,500 connections closed and opened again a second, an honest poll
# 3.2 times its quiet median; 5,000: none, 1.4-1.5 times: bench/connection_flood.py --send).
REFUSALS_DELAYED_AT_ONCE = 5000


def request_middleware(in_flight: InFlight, metrics: Metrics, errors: ErrorAnswers,
                       too_many_requests_delay: float = 0.0):
    observe = metrics.observe_request
    refusals = RefusalDelay(too_many_requests_delay)
    answering = in_flight.answering

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        took = None  # the request's time, when a delay follows it
        in_flight.count += 1
        answering.add(request.protocol)
        try:
            try:
                response = await handler(request)
            except Exception as error:
                response = errors.answer(request, error)
            status = response.status
            if in_flight.draining:
                response.force_close()  # no further request on this connection
            elif response.status == 429 and refusals.seconds:
                took = time.perf_counter() - started
                await refusals.hold(request, response)
            return response
        except web.HTTPException as error:  # a redirect or 304, raised again
            status = error.status
            raise
        finally:
            in_flight.count -= 1
            answering.discard(request.protocol)
            observe(request, status, took if took is not None else time.perf_counter() - started)

    return middleware


class RefusalDelay:
    """The wait before a 429 is sent: `seconds` (0: none), at most its Retry-After, for at
    most REFUSALS_DELAYED_AT_ONCE refusals at a time, and none for a client already gone
    (aiohttp does not cancel its handler: it would hold its request for nothing). Past
    them a 429 is sent at once and its connection closed: answered at once and kept, a
    flooder's connection was refused thousands of times a second again (a red team's
    4,000 connections from one address). What arrived of the body is let go before the
    wait (aiohttp reads and drops the rest after the answer, as without the delay).
    Retry-After still counts from the request."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at_once = REFUSALS_DELAYED_AT_ONCE
        self.waiting = 0

    async def hold(self, request: web.Request, response: web.StreamResponse) -> None:
        """Waits before `response` (a 429) is sent, or closes its connection after it."""
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        if self.waiting >= self._at_once:
            response.force_close()
            return
        if request.can_read_body and request.content.exception() is None:
            request.content.read_nowait()  # the body's bytes buffered so far, dropped
        self.waiting += 1
        try:
            await asyncio.sleep(refusal_delay(response, self.seconds))
        finally:
            self.waiting -= 1


def refusal_delay(response: web.StreamResponse, delay: float) -> float:
    """`delay`, at most the response's Retry-After (seconds)."""
    try:
        return min(delay, float(response.headers.get("Retry-After", delay)))
    except ValueError:
        return delay
