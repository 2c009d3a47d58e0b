"""The owners' API, for the subscriber-facing frontend (backend to backend, under /api/ with
the notification API and its bearer token; docs/notification-api.md, "Owners' API"): a
router's day or week, its alerts and sightings of the last 30 days, its owner's marks "not
an attack", and the owner's weekly report. Every route names the user and one of their
routers: another user's router, or one that does not exist, is the same 404."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime

from aiohttp import web

from server.errors import BadRequest, Conflict, json_response
from server.feedback import marks
from server.feedback import sql as marks_db
from server.feedback.config import FeedbackConfig
from server.feedback.sql import Mark
from server.handlers.reading import json_object, paging
from server.intel import sql as intel_db
from server.intel.owners import sighting_fields
from server.reports import sql as reports_db
from server.reports.choices import change_schedule
from server.reports.jobs import SignatureNames
from server.reports.summary import PERIODS, listed_since, router_summary
from server.settings import Settings
from server.timestamps import iso_utc
from server.typedefs import DATABASE

_ROUTER = "/owners/{userId}/routers/{mac}"


def _user(request: web.Request) -> str:
    """The user the path names, as it is: a user no router is owned by, however written,
    owns nothing here (404), as the owners were checked when set."""
    return request.match_info["userId"]


async def _owned(request: web.Request) -> tuple[str, str, datetime | None]:
    user = _user(request)
    mac, since = await marks.owned_router(request.config_dict[DATABASE], user,
                                          request.match_info["mac"])
    return user, mac, since


async def _now(request: web.Request):
    (now,) = await request.config_dict[DATABASE].fetchrow("SELECT now()")
    return now


def _mark_json(mark: Mark) -> dict:
    return {"id": mark.id, "what": mark.kind, "value": mark.value, "feed": mark.feed,
            "note": mark.note, "markedAt": iso_utc(mark.marked_at),
            "unmarkedAt": iso_utc(mark.unmarked_at)}


async def _routers_owned(request: web.Request, user: str) -> list:
    """The (mac, owner since) of each router `user` owns; NotYours when none."""
    found = (await reports_db.routers_of(request.config_dict[DATABASE], [user])).get(user)
    if not found:
        raise marks.NotYours(f"user {user[:64]!r} owns no router")
    return found


async def _routers(request: web.Request) -> web.Response:
    found = await _routers_owned(request, _user(request))
    return json_response({"routers": [{"mac": mac, "ownerSince": iso_utc(since)}
                                      for mac, since in found]})


async def _alerts(request: web.Request) -> web.Response:
    limit, offset = paging(request)
    _, mac, since = await _owned(request)
    now = await _now(request)
    start = listed_since(now, since)
    rows, total = await reports_db.alerts_page(request.config_dict[DATABASE], mac, start,
                                               now, limit, offset)
    return json_response({
        "alerts": [{"hour": iso_utc(hour), "src": src, "dest": dest, "sid": sid,
                    "severity": severity, "count": count}
                   for hour, src, dest, sid, severity, count in rows],
        "total": total, "since": iso_utc(start)})


async def _sightings(request: web.Request) -> web.Response:
    limit, offset = paging(request)
    _, mac, since = await _owned(request)
    start = listed_since(await _now(request), since)
    rows, total = await intel_db.sightings_page(request.config_dict[DATABASE], mac,
                                                start, limit, offset)
    listed = []
    for row in rows:
        fields = sighting_fields(row)
        listed.append({**fields, "closed": row[9],
                       "markValue": f"{fields['kind']}:{fields['indicator']}"})
    return json_response({"sightings": listed, "total": total, "since": iso_utc(start)})


async def _false_positives(request: web.Request) -> web.Response:
    limit, offset = paging(request)
    user, mac, _ = await _owned(request)
    found, total = await marks_db.of_router(request.config_dict[DATABASE], mac, user,
                                            limit, offset)
    return json_response({"falsePositives": [_mark_json(m) for m in found],
                          "total": total})


async def _weekly_report(request: web.Request) -> web.Response:
    user = _user(request)
    body = await json_object(request)
    weekly, at, zone = body.get("weekly"), body.get("at"), body.get("zone")
    if not isinstance(weekly, (bool, type(None))) or not all(
            isinstance(v, (str, type(None))) for v in (at, zone)):
        raise BadRequest("expected {\"weekly\": true|false, \"at\": \"mon 08:00\", "
                         "\"zone\": \"Europe/Prague\"}, each optional")
    await _routers_owned(request, user)
    schedule = await change_schedule(request.config_dict[DATABASE], user, weekly, at,
                                     zone)
    return json_response({"weekly": schedule.weekly, "at": schedule.described})


def owner_routes(settings: Settings) -> list[web.RouteDef]:
    config = FeedbackConfig.from_settings(settings)
    names = SignatureNames(settings.rule_data_path)

    async def summary(request: web.Request) -> web.Response:
        period = request.query.get("period", "week")
        if period not in PERIODS:
            raise BadRequest(f"period is one of {', '.join(PERIODS)}")
        _, mac, since = await _owned(request)
        known = await asyncio.to_thread(names)
        return json_response(await router_summary(request.config_dict[DATABASE], known, mac,
                                                  since, period, await _now(request)))

    async def mark(request: web.Request) -> web.Response:
        user = _user(request)
        body = await json_object(request)
        what, value, note = body.get("what"), body.get("value"), body.get("note")
        if not isinstance(what, str) or not isinstance(value, str) or not isinstance(
                note, (str, type(None))):
            raise BadRequest("expected {\"what\": \"address\" | \"signature\" | \"sighting\", "
                             "\"value\": \"...\", \"note\": \"...\" (optional)}")
        made, new = await marks.mark(request.config_dict[DATABASE], config, user,
                                     request.match_info["mac"], what, value, note)
        if not new:  # recorded once: the repeat is told so, with the mark stored
            repeated = Conflict(f"{what} {value[:80]!r} is marked already for this router")
            repeated.details = {"falsePositive": _mark_json(made)}
            raise repeated
        return json_response({"falsePositive": _mark_json(made)}, status=201)

    async def unmark(request: web.Request) -> web.Response:
        user = _user(request)
        raw = request.match_info["markId"]
        if not re.fullmatch(r"[0-9]{1,18}", raw):
            raise BadRequest("a mark's id is a number")
        await marks.unmark(request.config_dict[DATABASE], config, user,
                           request.match_info["mac"], int(raw))
        return json_response({"message": "Mark undone."})

    return [web.get("/owners/{userId}/routers", _routers),
            web.get(f"{_ROUTER}/summary", summary),
            web.get(f"{_ROUTER}/alerts", _alerts),
            web.get(f"{_ROUTER}/sightings", _sightings),
            web.get(f"{_ROUTER}/false-positives", _false_positives),
            web.post(f"{_ROUTER}/false-positives", mark),
            web.delete(f"{_ROUTER}/false-positives/{{markId}}", unmark),
            web.put("/owners/{userId}/weekly-report", _weekly_report)]
