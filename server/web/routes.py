"""How routes are added: each handler wrapped once, at start-up, in its app's middlewares,
and last routes of each app answering every other path (404, or 405 with the methods its
path has), its bare prefix included (a sub-application's `/api`, without the slash).

aiohttp can run the middlewares itself (`web.Application(middlewares=...)`), but then every
request of every app, sub-applications' included, also passes through a middleware of
aiohttp's own that sets the current app, built from a cache keyed by the route on each
request: on a 304 rules poll, the hottest path of the service, about 4 µs of 60 (measured
with `python -m bench.polling`). Wrapped here, a request runs its handler's middlewares
and nothing else. The middlewares keep aiohttp's shape (`async def m(request, handler)`).
"""

from __future__ import annotations

import functools
from typing import Awaitable, Callable, Iterable

from aiohttp import web

from server.metrics import UNMATCHED, is_unmatched

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[..., Awaitable[web.StreamResponse]]


def add_routes(app: web.Application, routes: Iterable[web.RouteDef],
               *middlewares: Middleware) -> None:
    """Add `routes` to `app`, each handler inside `middlewares` (the first outermost), then
    the app's last routes, inside them too."""
    answer_unmatched = wrapped(unmatched, middlewares)
    app.router.add_routes(
        [web.RouteDef(route.method, route.path, wrapped(route.handler, middlewares),
                      route.kwargs) for route in routes]
        + [web.route("*", "", answer_unmatched, name=f"{UNMATCHED}-prefix"),
           web.route("*", "/{path:.*}", answer_unmatched, name=UNMATCHED)])


def wrapped(handler: Handler, middlewares: tuple[Middleware, ...]) -> Handler:
    for middleware in reversed(middlewares):
        handler = functools.partial(middleware, handler=handler)
    return handler


async def unmatched(request: web.Request) -> web.StreamResponse:
    """A path no other route of the app has (404), or has with other methods (405)."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if not is_unmatched(resource):
            allowed |= (await resource.resolve(request))[1]
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    raise web.HTTPNotFound()
