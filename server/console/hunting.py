"""The console's Hunt page (support and operators): the fleet-wide search of
`router-backend hunt`, recorded with the signed-in user; the hunts made (operators); and a
router's records carrying an indicator, read from its chunks for the days the index names,
recorded as a hunt is. Hunts and drill-downs are a few at a time per process (HuntGate), so
that no console user can take the pool's connections or the threads uploads compress on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timedelta, timezone
from typing import AsyncIterator

import aiohttp_jinja2
from aiohttp import web

from server.console.auth import USER
from server.hunt import sql as hunt_db
from server.errors import BadRequest, Forbidden, TooManyRequests
from server.hunt.config import HuntConfig, records_kept_days
from server.hunt.search import (LOG_SHOWN, MATCHES_SHOWN, Hunt, count_text, day_asked,
                                hunt_indexed, hunt_log)
from server.hunt.sightings import router_days
from server.telemetry.export import records_carrying
from server.telemetry.indicators import IndicatorError, from_line, match_argument
from server.tuning import changes as tuning
from server.typedefs import DATABASE, SETTINGS
from server.web.limits import Buckets

INDICATORS_ASKED = 100    # lines of one hunt
MAX_OFFSET = 1_000_000    # where a page may start
RECORDS_SHOWN = 200       # on a router's drill-down page
RECORD_BYTES_SHOWN = 4096  # of each record there: a router chooses how long its records are
DRILL_DOWN_SECONDS = 10.0  # reading a router's chunks: past this, what was found is shown
DRILL_DOWN_AFTER = 3_600  # seconds: a drill-down follows its user's hunt of the indicator
HUNTS_AT_ONCE = 2         # hunts and drill-downs under way in one process, one a user
HUNTS_PER_MINUTE = 30     # a console user's hunts and drill-downs, in one process
_NUMBER = re.compile(r"[0-9]{1,9}")  # ASCII digits: int() refuses some that isdigit() takes


class HuntRefused(Exception):
    """A hunt that cannot start now; the message says why and when to try again."""


class HuntGate:
    """What a console hunt or drill-down takes before it starts: a token of its user's
    HUNTS_PER_MINUTE, then one of HUNTS_AT_ONCE places, one a user, refused at once when none
    is free (never queued); a drill-down reads chunks on threads of its own, for at most
    DRILL_DOWN_SECONDS, so no user holds a place for long."""

    def __init__(self) -> None:
        self._per_user = Buckets(HUNTS_PER_MINUTE)
        self._holders: set[str] = set()
        self.threads = ThreadPoolExecutor(HUNTS_AT_ONCE, thread_name_prefix="drill-down")

    @contextlib.asynccontextmanager
    async def place(self, user: str) -> AsyncIterator[None]:
        if user in self._holders:
            raise HuntRefused("your last hunt is still under way: try again when it ends")
        wait = self._per_user.take(user, 1, time.monotonic())
        if wait:
            raise HuntRefused(f"at most {HUNTS_PER_MINUTE} hunts a minute: try again in "
                              f"{max(1, round(wait))} s")
        if len(self._holders) >= HUNTS_AT_ONCE:
            raise HuntRefused("other hunts are under way: try again in a moment")
        self._holders.add(user)
        try:
            yield
        finally:
            self._holders.discard(user)

    async def close(self, app: web.Application) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)


HUNT_GATE = web.AppKey("hunt_gate", HuntGate)


def install(app: web.Application) -> None:
    app[HUNT_GATE] = gate = HuntGate()
    app.on_cleanup.append(gate.close)


ROUTES = web.RouteTableDef()


def _day(text) -> date | None:
    """The form's last day searched: None when blank (today); IndicatorError unless a day."""
    if text is None or text == "":
        return None
    try:
        return day_asked(text if isinstance(text, str) else "")
    except ValueError:
        raise IndicatorError("the last day is a day, YYYY-MM-DD, or blank for today") from None


def _number(text, default: int) -> int:
    if text is None:
        return default
    return int(text) if isinstance(text, str) and _NUMBER.fullmatch(text) else -1


async def _page(request: web.Request, status: int = 200, **context) -> web.Response:
    user = request[USER]
    log, skip = None, max(0, _number(request.query.get("log_from"), 0))
    if user.may_change:
        log = await hunt_log(request.config_dict[DATABASE], LOG_SHOWN + 1, skip)
    return aiohttp_jinja2.render_template("hunt.html", request, {
        "user": user, "path": request.path_qs, "asked": "", "days": 30, "until": "",
        "answer": None,
        "error": None, "log": log and log[:LOG_SHOWN], "log_from": skip,
        "log_more": bool(log) and len(log) > LOG_SHOWN, "log_shown": LOG_SHOWN, **context},
        status=status)


@ROUTES.get("/hunt")
async def hunt_page(request: web.Request) -> web.Response:
    return await _page(request)


@ROUTES.post("/hunt")
async def hunt(request: web.Request) -> web.Response:
    form = await request.post()
    asked = form.get("indicators", "")
    asked = asked if isinstance(asked, str) else ""
    settings = request.config_dict[SETTINGS]
    try:
        lines = [line for line in asked.splitlines() if line.strip()][:INDICATORS_ASKED + 1]
        if len(lines) > INDICATORS_ASKED:
            raise IndicatorError(f"at most {INDICATORS_ASKED} indicators a hunt")
        indicators = tuple(dict.fromkeys(i for i in map(from_line, lines) if i is not None))
        if not indicators:
            raise IndicatorError("name at least one indicator")
        _refuse_households(request, indicators)
        days = _number(form.get("days"), 30)
        if not 1 <= days <= settings.hunt_retention_days:
            raise IndicatorError(f"days back is 1 to {settings.hunt_retention_days} (the "
                                 "index's HUNT_RETENTION_DAYS)")
        until = _day(form.get("until"))
        offset = _number(form.get("offset"), 0)
        if not 0 <= offset <= MAX_OFFSET:
            raise IndicatorError(f"a page starts at 0 to {MAX_OFFSET}")
    except HouseholdsRefused as error:
        return await _page(request, 403, asked=asked[:10_000], error=str(error))
    except IndicatorError as error:
        return await _page(request, 400, asked=asked[:10_000], error=str(error))
    try:
        async with request.config_dict[HUNT_GATE].place(request[USER].name):
            db = request.config_dict[DATABASE]
            answer = await hunt_indexed(db, HuntConfig.from_settings(settings),
                                        Hunt(indicators, days, MATCHES_SHOWN, offset, until),
                                        f"console:{request[USER].name}", "console")
    except HuntRefused as error:
        return await _page(request, 429, asked=asked[:10_000], days=days, error=str(error))
    return await _page(request, asked=asked, days=days, answer=answer, page=MATCHES_SHOWN,
                       until=until.isoformat() if until else "", count=count_text(answer))


class HouseholdsRefused(IndicatorError):
    """A hunt support may not make."""


def _refuse_households(request: web.Request, indicators) -> None:
    """Support may not hunt a private address or network (every home network has its own
    172.17.0.x: such a hunt, and its drill-downs, read households' traffic, as a top-level
    domain would); an operator may, and the hunt log names them."""
    if request[USER].may_change:
        return
    for wanted in indicators:
        if wanted.in_households:
            raise HouseholdsRefused(
                f"{wanted.value} is not a public address: every household has its own, so "
                "its hunt reads households' traffic, not one host's; an operator may hunt it "
                "(recorded in the hunt log)")


@ROUTES.get("/routers/{mac}/records")
async def router_records(request: web.Request) -> web.Response:
    """The router's records carrying an indicator, recorded in the hunt log with the router."""
    mac = tuning.router_mac(request.match_info["mac"])
    try:
        wanted = match_argument(request.query.get("match", ""))
        if wanted.kind == "domain" and "." not in wanted.value:
            raise IndicatorError(f"{wanted.value!r} is a top-level domain: a router's records "
                                 "under it are its browsing, not a sighting; name a domain "
                                 "under it")
        _refuse_households(request, (wanted,))
    except HouseholdsRefused as error:
        raise Forbidden(str(error)) from None
    except IndicatorError as error:
        raise BadRequest(f"?match=KIND:VALUE: {error}") from None
    db, settings = request.config_dict[DATABASE], request.config_dict[SETTINGS]
    kept = records_kept_days(settings) or settings.hunt_retention_days
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    since = today - timedelta(days=kept - 1)
    gate = request.config_dict[HUNT_GATE]
    try:
        async with gate.place(request[USER].name):
            if not await hunt_db.hunted_lately(db, f"console:{request[USER].name}",
                                               wanted.kind, wanted.value, DRILL_DOWN_AFTER):
                raise Forbidden(f"hunt for {wanted.kind} {wanted.value} first: a router's "
                                "records are opened from a hunt of yours of the last "
                                f"{DRILL_DOWN_AFTER // 60} minutes that found it")
            days = await router_days(db, mac, wanted.postings(), since, today)
            records, stopped = await asyncio.get_running_loop().run_in_executor(
                gate.threads, _records, db.location, mac, wanted, days)
            await hunt_db.record_hunt(
                db, f"console:{request[USER].name}", "console",
                json.dumps([{"kind": wanted.kind, "value": wanted.value}]), since.date(),
                today.date(), len(records), router=mac)
    except HuntRefused as error:
        raise TooManyRequests(str(error)) from None
    return aiohttp_jinja2.render_template("records.html", request, {
        "user": request[USER], "path": request.path_qs, "mac": mac, "wanted": wanted,
        "days": [day.date().isoformat() for day in days], "records": records,
        "limit": RECORDS_SHOWN, "retention_days": records_kept_days(settings),
        "stopped": stopped and DRILL_DOWN_SECONDS})


def _records(location, mac: str, wanted, days: list[datetime]
             ) -> tuple[list[tuple[str, str]], bool]:
    """The router's records carrying `wanted`, read day by day from the days named, each cut
    to RECORD_BYTES_SHOWN; and whether the reading stopped at DRILL_DOWN_SECONDS."""
    found, deadline = [], time.monotonic() + DRILL_DOWN_SECONDS
    for day in days:
        for stored in records_carrying(location, mac, wanted, None, day,
                                       day + timedelta(days=1), deadline):
            found.append((stored.received_at.strftime("%Y-%m-%dT%H:%M:%SZ"), _shown(stored.line)))
            if len(found) >= RECORDS_SHOWN:
                return found, False
        if time.monotonic() > deadline:
            return found, True
    return found, False


def _shown(line: bytes) -> str:
    if len(line) <= RECORD_BYTES_SHOWN:
        return line.decode("utf-8", "replace")
    return (line[:RECORD_BYTES_SHOWN].decode("utf-8", "replace")
            + f" ... ({len(line):,} bytes in all: `router-backend telemetry export` has it whole)")
