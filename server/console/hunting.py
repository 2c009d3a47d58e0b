"""The console's Hunt page (support and operators): the fleet-wide search of
`router-backend hunt`, recorded with the signed-in user; the hunts made (operators); and a
router's records carrying an indicator, read from its chunks for the days the index names."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import aiohttp_jinja2
from aiohttp import web

from server.console.auth import USER
from server.db import hunt as hunt_db
from server.hunt.search import Hunt, hunt_log, run_hunt
from server.telemetry.export import records_carrying
from server.telemetry.indicators import IndicatorError, from_line, match_argument
from server.tuning import changes as tuning
from server.typedefs import DATABASE, SETTINGS

INDICATORS_ASKED = 100    # lines of one hunt
RECORDS_SHOWN = 200       # on a router's drill-down page


def routes() -> list[web.RouteDef]:
    return [web.get("/hunt", hunt_page), web.post("/hunt", hunt),
            web.get("/routers/{mac}/records", router_records)]


async def _page(request: web.Request, **context) -> web.Response:
    user = request[USER]
    log = await hunt_log(request.config_dict[DATABASE]) if user.may_change else None
    return aiohttp_jinja2.render_template("hunt.html", request, {
        "user": user, "path": request.path_qs, "asked": "", "days": 30, "answer": None,
        "error": None, "log": log, **context}, status=400 if context.get("error") else 200)


async def hunt_page(request: web.Request) -> web.Response:
    return await _page(request)


async def hunt(request: web.Request) -> web.Response:
    form = await request.post()
    asked = form.get("indicators", "")
    asked = asked if isinstance(asked, str) else ""
    days_text = form.get("days", "30")
    try:
        lines = [line for line in asked.splitlines() if line.strip()][:INDICATORS_ASKED + 1]
        if len(lines) > INDICATORS_ASKED:
            raise IndicatorError(f"at most {INDICATORS_ASKED} indicators a hunt")
        indicators = tuple(dict.fromkeys(i for i in map(from_line, lines) if i is not None))
        if not indicators:
            raise IndicatorError("name at least one indicator")
        days = int(days_text) if isinstance(days_text, str) and days_text.isdigit() else 0
        if not 1 <= days <= 3660:
            raise IndicatorError("days back is 1 to 3660")
    except IndicatorError as error:
        return await _page(request, asked=asked[:10_000], error=str(error))
    settings = request.config_dict[SETTINGS]
    answer = await run_hunt(request.config_dict[DATABASE], Hunt(indicators, days),
                            f"console:{request[USER].name}", "console",
                            settings.retention_days)
    return await _page(request, asked=asked, days=days, answer=answer)


async def router_records(request: web.Request) -> web.Response:
    mac = tuning.router_mac(request.match_info["mac"])
    try:
        wanted = match_argument(request.query.get("match", ""))
    except IndicatorError as error:
        raise web.HTTPBadRequest(text=str(error))
    db, settings = request.config_dict[DATABASE], request.config_dict[SETTINGS]
    kept_from = datetime.now(timezone.utc) - timedelta(days=settings.retention_days)
    days = await hunt_db.router_days(db, mac, [(wanted.code, wanted.stored,
                                                wanted.kind == "domain")],
                                     kept_from.replace(hour=0, minute=0, second=0,
                                                       microsecond=0))
    records = await asyncio.to_thread(_records, db.location, mac, wanted, days)
    return aiohttp_jinja2.render_template("records.html", request, {
        "user": request[USER], "path": request.path_qs, "mac": mac, "wanted": wanted,
        "days": [day.date().isoformat() for day in days], "records": records,
        "limit": RECORDS_SHOWN, "retention_days": settings.retention_days})


def _records(location, mac: str, wanted, days: list[datetime]) -> list[tuple[str, str]]:
    """The router's records carrying `wanted`, read day by day from the days named."""
    found = []
    for day in days:
        for stored in records_carrying(location, mac, wanted, None, day,
                                       day + timedelta(days=1)):
            found.append((stored.received_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                          stored.line.decode("utf-8", "replace")))
            if len(found) >= RECORDS_SHOWN:
                return found
    return found
