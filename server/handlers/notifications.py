"""The notification API, a sub-application mounted at /api/ (documented in
docs/notification-api.md and the OpenAPI document)."""

from __future__ import annotations


from aiohttp import web

from server.notify import sql as notification_db
from server.handlers.domain_errors import DOMAIN_STATUSES
from server.errors import BadRequest, NotFound, Unauthorized, error_middleware, json_response
from server.idempotency_key import idempotency_key
from server.notify.fields import recipient_field, text_field
from server.handlers.owners import owner_routes
from server.handlers.reading import json_object, paging
from server.notify.records import feed_item_json, record_json, with_deliveries_json
from server.notify.sends import fingerprint
from server.notify.texts import TYPES, NotificationType
from server.web.peers import bearer_matches
from server.web.routes import Middleware, add_routes
from server.settings import Settings
from server.typedefs import DATABASE, SENDS

def send_handler(kind: NotificationType):
    async def handler(request: web.Request) -> web.Response:
        body = await json_object(request)
        key = idempotency_key(request.headers)
        user_id = text_field("userId", body.get("userId"))
        recipient = recipient_field(body.get("recipient"))
        value = text_field(kind.field, body.get(kind.field))
        notification = notification_db.new_notification(
            user_id, kind.name, kind.title.format(value=value), kind.message.format(value=value),
            recipient, {kind.metadata_key: value}, request.config_dict[SENDS].pending_grace)
        answer = await request.config_dict[SENDS].send(
            kind, notification, key, fingerprint(kind, body) if key else "")
        return json_response(answer.body, status=answer.status)
    return handler


async def mark_read(request: web.Request) -> web.Response:
    record = await notification_db.mark_read(request.config_dict[DATABASE],
                                             request.match_info["notificationId"])
    if record is None:
        raise NotFound("notification not found")
    return json_response({"message": "Notification marked as read.",
                          "notification": record_json(record)})


async def mark_all_read(request: web.Request) -> web.Response:
    updated = await notification_db.mark_all_read(request.config_dict[DATABASE],
                                                  request.match_info["userId"])
    if updated is None:
        raise NotFound("user has no notifications")
    return json_response({"message": "All notifications marked as read.", "updated": updated})


async def one_notification(request: web.Request) -> web.Response:
    found = await notification_db.with_deliveries(request.config_dict[DATABASE],
                                                  request.match_info["notificationId"])
    if found is None:
        raise NotFound("notification not found")
    return json_response(with_deliveries_json(found))


def _read_filter(request: web.Request) -> bool | None:
    raw = request.query.get("read")
    if raw is None:
        return None
    if raw not in ("true", "false"):
        raise BadRequest("read must be true or false")
    return raw == "true"


async def user_notifications(request: web.Request) -> web.Response:
    limit, offset = paging(request)
    feed = await notification_db.user_feed(request.config_dict[DATABASE],
                                           request.match_info["userId"], limit, offset,
                                           _read_filter(request))
    if not feed.exists:
        raise NotFound("user has no notifications")
    return json_response({"notifications": [feed_item_json(item) for item in feed.items],
                          "total": feed.total, "unread": feed.unread})


def token_middleware(token: str):
    @web.middleware
    async def middleware(request: web.Request, handler):
        if not bearer_matches(request.headers, token):
            raise Unauthorized("missing or wrong bearer token")
        return await handler(request)
    return middleware


def create_notifications_app(settings: Settings, outer: Middleware) -> web.Application:
    """Errors as the seed wants them: 500 (not 503) when the database cannot be written.
    `outer`: the middleware every request of the service passes first."""
    middlewares = [outer,
                   error_middleware(settings.db_retry_after_seconds, unavailable_status=500,
                                    domain=DOMAIN_STATUSES)]
    if settings.notification_api_token:
        middlewares.append(token_middleware(settings.notification_api_token))
    app = web.Application()
    add_routes(app, [web.post(f"/notifications/{kind.path}", send_handler(kind))
                     for kind in TYPES] + [
        # A UUID only, so a POST to an unknown send type stays a 404 (not a 405 of this route).
        web.get("/notifications/{notificationId:[0-9a-fA-F-]{32,36}}", one_notification),
        web.put("/notifications/{notificationId}/read", mark_read),
        web.get("/workflow/users/{userId}/notifications", user_notifications),
        web.put("/workflow/users/{userId}/notifications/read", mark_all_read)]
        + owner_routes(settings), *middlewares)
    return app
