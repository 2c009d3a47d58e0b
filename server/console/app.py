"""The console's sub-application (mounted at /console/ by server/app.py): its templates,
the middleware every console request passes (listener, session, CSRF, role, HTML errors and
the headers that keep pages from running anything a router sent), and its routes."""

from __future__ import annotations

import ipaddress
import logging
import socket
from datetime import datetime, timezone

import aiohttp_jinja2
import jinja2
from aiohttp import web

from engine.addresses import canonical
from server.console import hunting, views
from server.console.auth import COOKIE, SESSIONS, USER, Sessions, csrf_matches
from server.db.pool import DatabaseUnavailable
from server.errors import ApiError, Forbidden, Unauthorized
from server.settings import Settings
from server.tuning.changes import TuningRefused
from server.typedefs import DATABASE
from server.web.routes import Middleware, add_routes

log = logging.getLogger("router_backend.console")

# CONSOLE_LISTEN's addresses (None: every address, a wildcard) and port.
CONSOLE_LISTENER = web.AppKey("console_listener", tuple)
# Pages run no script at all: even a record that slipped past escaping could not execute.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "img-src 'self' data:; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin", "Cache-Control": "no-store"}
OPEN_PATHS = ("/console/sign-in",)
# Forms support may post too: they change nothing (a hunt is recorded, not a change).
READING_FORMS = frozenset({"/console/sign-out", "/console/hunt"})


def create_console_app(settings: Settings, outer: Middleware) -> web.Application:
    """`outer`: the middleware every request of the service passes first."""
    app = web.Application()
    app[SESSIONS] = Sessions(settings)
    hunting.install(app)
    if settings.console_listen is not None:
        host, port = settings.console_listen
        app[CONSOLE_LISTENER] = (listener_addresses(host), port)
    environment = aiohttp_jinja2.setup(
        app, loader=jinja2.PackageLoader("server.console", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined)
    environment.filters["moment"] = moment
    add_routes(app, views.routes(), outer, console_middleware)
    return app


def moment(value: datetime | None) -> str:
    """A time as people read it on a page (to the second, UTC)."""
    if value is None:
        return "never"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@web.middleware
async def console_middleware(request: web.Request, handler) -> web.StreamResponse:
    try:
        response = await _checked(request, handler)
    except web.HTTPException as error:
        if error.status < 400:
            _secure(error)
            raise
        response = _error_page(request, error.status, error.reason)
    except TuningRefused as error:
        response = _error_page(request, 400, str(error))
    except ApiError as error:
        response = _error_page(request, error.status, error.message, error.headers)
    except DatabaseUnavailable:
        response = _error_page(request, 503, "the database is unavailable; try again shortly")
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        response = _error_page(request, 500, "something went wrong (logged on the server)")
    _secure(response)
    return response


async def _checked(request: web.Request, handler) -> web.StreamResponse:
    listener = request.app.get(CONSOLE_LISTENER)
    if listener is not None and not _accepted_on(request, *listener):
        raise web.HTTPNotFound()   # the console has a listener of its own (CONSOLE_LISTEN)
    user = await request.app[SESSIONS].user_of(request.config_dict[DATABASE],
                                               request.cookies.get(COOKIE))
    request[USER] = user
    if request.path in OPEN_PATHS:
        return await handler(request)
    if user is None:
        expired = COOKIE in request.cookies
        if request.method == "GET":
            raise web.HTTPSeeOther(views.sign_in_url(request.path_qs, expired))
        raise Unauthorized("you are not signed in, or your session expired: sign in again "
                           "(nothing was changed)")
    if request.method == "POST":
        form = await request.post()
        if not csrf_matches(user, views.field(form, "csrf")):
            raise Forbidden("this form's CSRF token is missing or stale: reload the page and "
                            "try again (nothing was changed)")
        if not user.may_change and request.path not in READING_FORMS:
            raise Forbidden(f"{user.name} signs in as support, which reads only: changes "
                            "need an operator (nothing was changed)")
    return await handler(request)


def listener_addresses(host: str) -> frozenset | None:
    """The addresses CONSOLE_LISTEN's host names (None for a wildcard: every address)."""
    addresses = {_address(info[4][0])
                 for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    return None if any(a.is_unspecified for a in addresses) else frozenset(addresses)


def _accepted_on(request: web.Request, addresses: frozenset | None, port: int) -> bool:
    """Whether the connection came in on the console's listener: its port, and its address
    too (LISTEN_HOST may listen on the same port at another address)."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    if not sockname or sockname[1] != port:
        return False
    return addresses is None or _address(sockname[0]) in addresses


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return canonical(text.split("%")[0])  # a listener's own link-local address has a zone


def _error_page(request: web.Request, status: int, message: str,
                headers: dict | None = None) -> web.Response:
    response = aiohttp_jinja2.render_template(
        "error.html", request, {"status": status, "message": message,
                                "user": request.get(USER)}, status=status)
    response.headers.update(headers or {})
    return response


def _secure(response: web.StreamResponse) -> None:
    response.headers.update(HEADERS)
