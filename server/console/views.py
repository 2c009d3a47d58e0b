"""The console's pages and forms. Pages read (server/console/story.py, server/status.py,
server/console/sql.py); forms change through server/tuning, as the commands do, and answer
303 back to the page they were posted from, where the change shows in the record."""

from __future__ import annotations

import asyncio
import functools
import secrets
from typing import Any, Awaitable, Callable
from urllib.parse import quote, urlencode

import aiohttp_jinja2
from aiohttp import web

from server.console.auth import (COOKIE, SESSIONS, USER, cookie_secure, hash_secret,
                                  secret_matches)
from server.console import hunting
from server.console.charts import bars
from server.console.story import router_story
from server.tuning import allowlist_sql as allowlist_db
from server.console import sql as console_db
from server.enforcement.config import EnforcementConfig
from server.enforcement.figures import effectiveness, router_enforcement
from server.feedback import sql as marks_db
from server.feedback.config import FeedbackConfig
from server.feedback.marks import fleet_view
from server.intel import sql as intel_db
from server.tuning import override_sql as overrides_db
from server.db import tuning_changes
from server.intel.listing import sightings as intel_sightings
from engine.intel import shown
from server.fleet import lists as fleet_lists
from server.status import fleet_status
from server.tuning import changes as tuning
from server.typedefs import DATABASE, FLOOD_LIMITS, SETTINGS
from server.web.peers import client_address

SIGN_IN_COOKIE = "console_sign_in"   # the sign-in form's own CSRF token (double submit)


@functools.cache
def _nobody() -> str:
    """Checked against when the name is unknown, so that a wrong name costs the same time."""
    return hash_secret(secrets.token_urlsafe(16))


ROUTES = web.RouteTableDef()


def routes() -> list[web.RouteDef]:
    return [*ROUTES, *hunting.ROUTES]


def field(form, name: str) -> str:
    """A form field's text ("" when absent, or a file where text was expected)."""
    value = form.get(name, "")
    return value if isinstance(value, str) else ""


def sign_in_url(back: str, expired: bool = False) -> str:
    query = {"next": back} if back.startswith("/console/") and back != "/console/" else {}
    if expired:
        query["expired"] = "1"
    return "/console/sign-in" + ("?" + urlencode(query) if query else "")


def _back(target: str | None) -> str:
    """Where a form sends the browser after it: a console page, never another site."""
    if target and target.startswith("/console/") and not target.startswith("/console//") \
            and "\\" not in target:
        return target
    return "/console/"


def _secure(request: web.Request) -> bool:
    return cookie_secure(request, client_address(request,
                                                 request.config_dict[SETTINGS].trusted_proxies))


def _made_by(request: web.Request) -> str:
    return f"console:{request[USER].name}"


async def _render(request: web.Request, template: str, context: dict,
                  status: int = 200) -> web.Response:
    return aiohttp_jinja2.render_template(
        template, request, {"user": request.get(USER), "path": request.path_qs,
                            **context}, status=status)


@ROUTES.get("/sign-in")
async def sign_in_page(request: web.Request) -> web.Response:
    return await _sign_in_form(request)


async def _sign_in_form(request: web.Request, message: str | None = None,
                        status: int = 200) -> web.Response:
    token = secrets.token_urlsafe(24)
    if request.query.get("expired") and message is None:
        message = "Your session expired: sign in again."
    response = await _render(request, "sign_in.html", {
        "token": token, "next": _back(request.query.get("next")), "message": message,
        "anyone": request.app[SESSIONS].anyone}, status)
    response.set_cookie(SIGN_IN_COOKIE, token, path="/console/", httponly=True,
                        samesite="Strict", secure=_secure(request))
    return response


@ROUTES.post("/sign-in")
async def sign_in(request: web.Request) -> web.StreamResponse:
    flood = request.config_dict[FLOOD_LIMITS]
    address = client_address(request, request.config_dict[SETTINGS].trusted_proxies)
    flood.begin_attempt(address)  # before the form is read: its place is taken at once
    try:
        form = await request.post()
        sent, expected = field(form, "token"), request.cookies.get(SIGN_IN_COOKIE, "")
        stale = not expected or not secrets.compare_digest(sent.encode(), expected.encode())
        sessions = request.app[SESSIONS]
        name, secret = field(form, "name")[:64], field(form, "secret")
        credential = sessions.credential_of(name)
        matches = not stale and await asyncio.to_thread(secret_matches, secret,
                                                        credential or _nobody())
    except BaseException:
        flood.attempt_succeeded(address)  # no secret was checked
        raise
    if stale:
        flood.attempt_succeeded(address)
        return await _sign_in_form(request, "The sign-in form was stale: try again.", 403)
    if credential is None or not matches:
        flood.credential_failed(address, f"console sign-in as {name!r}")
        return await _sign_in_form(request, "Wrong name or secret.", 401)
    flood.attempt_succeeded(address)
    session = await sessions.start(request.config_dict[DATABASE], name, address)
    response = web.HTTPSeeOther(_back(field(form, "next")))
    response.set_cookie(COOKIE, session, path="/console/", httponly=True,
                        samesite="Strict", secure=_secure(request), max_age=sessions.max_age)
    response.del_cookie(SIGN_IN_COOKIE, path="/console/")
    raise response


@ROUTES.post("/sign-out")
async def sign_out(request: web.Request) -> web.StreamResponse:
    await request.app[SESSIONS].end(request.config_dict[DATABASE], request.cookies.get(COOKIE))
    response = web.HTTPSeeOther("/console/sign-in")
    response.del_cookie(COOKIE, path="/console/")
    raise response


@ROUTES.get("/")
async def fleet_page(request: web.Request) -> web.Response:
    db = request.config_dict[DATABASE]
    status = await fleet_status(db, request.config_dict[SETTINGS])
    uploads = await console_db.uploads_per_hour(db)
    polls = await console_db.polls_per_hour(db)
    queue = status["generation_queue"]
    return await _render(request, "fleet.html", {
        "status": status, "attackers": await fleet_lists.attackers(db),
        "outbreaks": await fleet_lists.outbreaks(db),
        "fleet_settings": request.config_dict[SETTINGS],
        "uploads": bars([(f"{hour:%H}:00 UTC", count) for hour, count, _ in uploads]),
        "records": bars([(f"{hour:%H}:00 UTC", count) for hour, _, count in uploads]),
        "polls": bars([(f"{hour:%H}:00 UTC", count) for hour, count in polls]),
        "ages": bars(list(status["routers"]["by_last_poll"].items()), labelled=True),
        "backlog": bars([("claimed", queue["claimed"]), ("due", queue["due"]),
                         ("overdue", queue["overdue"]), ("failing", queue["failing"])],
                        labelled=True)})


@ROUTES.get("/routers")
async def find_router(request: web.Request) -> web.StreamResponse:
    mac = tuning.router_mac(request.query.get("mac", ""))
    raise web.HTTPSeeOther(f"/console/routers/{quote(mac)}")


@ROUTES.get("/routers/{mac}")
async def router_page(request: web.Request) -> web.Response:
    mac = tuning.router_mac(request.match_info["mac"])
    settings = request.config_dict[SETTINGS]
    story = await router_story(request.config_dict[DATABASE], mac)
    if story is None:
        return await _render(request, "error.html", {
            "status": 404, "message": f"{mac} is not registered"}, 404)
    return await _render(request, "router.html", {
        "story": story, "window_days": settings.rule_generation_telemetry_days,
        "sightings": await intel_sightings(request.config_dict[DATABASE], mac,
                                           SIGHTINGS_SHOWN),
        "marks": (await marks_db.of_router(request.config_dict[DATABASE], mac, None,
                                           MARKS_SHOWN, 0))[0],
        "enforced": await router_enforcement(request.config_dict[DATABASE], mac),
        "reset_minutes": settings.enrollment_reset_window_minutes})


SIGHTINGS_SHOWN = 500
ENFORCEMENT_DAYS = 7  # the Intel page's window (`router-backend enforcement --days` for others)
MARKS_SHOWN = 100


@ROUTES.get("/intel")
async def intel_page(request: web.Request) -> web.Response:
    db = request.config_dict[DATABASE]
    return await _render(request, "intel.html", {
        "feeds": await intel_db.feeds(db),
        "decisions": [(kind, shown(kind, value), *rest)
                      for kind, value, *rest in await intel_db.decisions(db)],
        "sightings": await intel_sightings(db, limit=SIGHTINGS_SHOWN),
        "shown": SIGHTINGS_SHOWN, "unowned": await intel_db.routers_without_owner(db),
        "feedback": await fleet_view(db, FeedbackConfig.from_settings(
            request.config_dict[SETTINGS])),
        "enforcement": await effectiveness(db, EnforcementConfig.from_settings(
            request.config_dict[SETTINGS]), ENFORCEMENT_DAYS)})


@ROUTES.get("/tuning")
async def tuning_page(request: web.Request) -> web.Response:
    db = request.config_dict[DATABASE]
    return await _render(request, "tuning.html", {
        "overrides": await overrides_db.entries(db), "allowed": await allowlist_db.entries(db),
        "changes": await tuning_changes.recent(db)})


def _tuning_form(path: str, change: Callable[[web.Request, Any, str], Awaitable[object]]
                 ) -> None:
    """A tuning form posted to `path`: the change made through server/tuning from the form's
    fields in the console user's name, then back to the page the form was posted from."""
    async def handler(request: web.Request) -> web.StreamResponse:
        form = await request.post()
        await change(request, form, _made_by(request))
        raise web.HTTPSeeOther(_back(field(form, "back")))
    ROUTES.post(path)(handler)


_ONE = "{id:\\d{1,18}}"   # an entry's id
_tuning_form("/tuning/overrides", lambda request, form, made_by: tuning.add_override(
    request.config_dict[DATABASE], request.config_dict[SETTINGS], field(form, "action"),
    field(form, "selector"), field(form, "mac"), field(form, "note"), made_by))
_tuning_form(f"/tuning/overrides/{_ONE}/remove", lambda request, form, made_by:
             tuning.remove_override(request.config_dict[DATABASE],
                                    int(request.match_info["id"]), made_by))
_tuning_form("/tuning/allowlist", lambda request, form, made_by: tuning.add_allowed(
    request.config_dict[DATABASE], field(form, "network"), field(form, "mac"),
    field(form, "note"), made_by))
_tuning_form(f"/tuning/allowlist/{_ONE}/remove", lambda request, form, made_by:
             tuning.remove_allowed(request.config_dict[DATABASE],
                                   int(request.match_info["id"]), made_by))


@ROUTES.post("/routers/{mac}/reset")
async def reset_enrollment(request: web.Request) -> web.StreamResponse:
    settings = request.config_dict[SETTINGS]
    await tuning.reset_enrollment(request.config_dict[DATABASE], request.match_info["mac"],
                                  settings.enrollment_reset_window_minutes, _made_by(request))
    mac = tuning.router_mac(request.match_info["mac"])
    raise web.HTTPSeeOther(f"/console/routers/{quote(mac)}")
