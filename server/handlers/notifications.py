"""The notification API, a sub-application mounted at /api/ (contract:
seeds/notification-service.md)."""

from __future__ import annotations

import hmac
import re

import orjson
from aiohttp import web

from server.db import notifications as notification_db
from server.errors import BadRequest, NotFound, Unauthorized, error_middleware, json_response
from server.notify.fields import recipient_field, text_field
from server.notify.service import PENDING_GRACE
from server.notify.texts import TYPES, NotificationType
from server.settings import Settings
from server.typedefs import DATABASE, NOTIFIER

DEFAULT_LIMIT, MAX_LIMIT = 20, 100


async def _json_object(request: web.Request) -> dict:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        raise BadRequest("body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def send_handler(kind: NotificationType):
    async def handler(request: web.Request) -> web.Response:
        body = await _json_object(request)
        user_id = text_field("userId", body.get("userId"))
        recipient = recipient_field(body.get("recipient"))
        value = text_field(kind.field, body.get(kind.field))
        record = await notification_db.create(
            request.config_dict[DATABASE], user_id, kind.name, kind.title.format(value=value),
            kind.message.format(value=value), recipient, {kind.metadata_key: value},
            PENDING_GRACE)
        error = await request.config_dict[NOTIFIER].deliver(record)
        if error is not None:
            return json_response({"error": "email delivery failed; the notification is stored "
                                           "and will be retried", "id": record["id"]},
                                 status=500)
        return json_response({"message": kind.reply})
    return handler


async def mark_read(request: web.Request) -> web.Response:
    record = await notification_db.mark_read(request.config_dict[DATABASE],
                                             request.match_info["notificationId"])
    if record is None:
        raise NotFound("notification not found")
    return json_response({"message": "Notification marked as read.", "notification": record})


def _paging(request: web.Request) -> tuple[int, int]:
    def number(name: str, default: int, low: int, high: int | None) -> int:
        raw = request.query.get(name)
        if raw is None:
            return default
        if not re.fullmatch(r"\d{1,9}", raw):
            raise BadRequest(f"{name} must be a whole number")
        value = int(raw)
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise BadRequest(f"{name} must be {bound}")
        return value
    return number("limit", DEFAULT_LIMIT, 1, MAX_LIMIT), number("offset", 0, 0, None)


async def user_notifications(request: web.Request) -> web.Response:
    limit, offset = _paging(request)
    items, total = await notification_db.user_feed(
        request.config_dict[DATABASE], request.match_info["userId"], limit, offset)
    if total == 0:
        raise NotFound("user has no notifications")
    return json_response({"notifications": items, "total": total})


def token_middleware(token: str):
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def middleware(request: web.Request, handler):
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            raise Unauthorized("missing or wrong bearer token")
        return await handler(request)
    return middleware


def create_notifications_app(settings: Settings) -> web.Application:
    """Errors as the seed wants them: 500 (not 503) when the database cannot be written."""
    middlewares = [error_middleware(settings.db_retry_after_seconds, unavailable_status=500)]
    if settings.notification_api_token:
        middlewares.append(token_middleware(settings.notification_api_token))
    app = web.Application(middlewares=middlewares)
    for kind in TYPES:
        app.router.add_post(f"/notifications/{kind.path}", send_handler(kind))
    app.router.add_put("/notifications/{notificationId}/read", mark_read)
    app.router.add_get("/workflow/users/{userId}/notifications", user_notifications)
    return app
