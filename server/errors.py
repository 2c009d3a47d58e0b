"""The one place that shapes error responses: `{"error": "<description>"}`.

Handlers raise `ApiError` subclasses (or aiohttp's HTTP exceptions); the middleware turns
them, and anything unexpected, into JSON. Unexpected errors are logged with their traceback
and answered 500 without internals.
"""

from __future__ import annotations

import logging
import time

import orjson
from aiohttp import web

from server.db.pool import DatabaseUnavailable
from server.refusal import Refusal

log = logging.getLogger("router_backend.http")

UNAVAILABLE_LOG_SECONDS = 10.0


class UnavailableLog:
    """Requests answered 503 because the database is away, logged at most once every
    UNAVAILABLE_LOG_SECONDS with how many there were since the last line: an outage under
    a fleet's load otherwise writes a line per request (3,265 in one fault drill)."""

    def __init__(self) -> None:
        self._logged_at = float("-inf")
        self._unlogged = 0

    def add(self, request: web.Request, error: DatabaseUnavailable) -> None:
        now = time.monotonic()
        if now - self._logged_at < UNAVAILABLE_LOG_SECONDS:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more answered 503 since the last line)" \
            if self._unlogged else ""
        log.warning("%s %s: database unavailable: %s%s", request.method, request.path, error,
                    more)
        self._logged_at, self._unlogged = now, 0


class ApiError(Exception):
    status = 400
    headers: dict[str, str] | None = None
    close_connection = False  # the rest of the request will not be read
    details: dict | None = None  # more fields of the answer, beside "error"

    def __init__(self, message: str, retry_after_seconds: int | None = None):
        """`retry_after_seconds`: when trying again may succeed (a Retry-After header)."""
        super().__init__(message)
        self.message = message
        if retry_after_seconds is not None:
            self.headers = {"Retry-After": str(retry_after_seconds)}


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class RequestTimeout(ApiError):
    """408: the body stopped arriving; the connection is closed after the answer."""
    status = 408
    close_connection = True


class Conflict(ApiError):
    """409: the request contradicts the state of the thing (or another request working on
    it); with a Retry-After, trying again later may succeed."""
    status = 409


class Unprocessable(ApiError):
    """422: well-formed, but contradicts what an earlier request established."""
    status = 422


class PayloadTooLarge(ApiError):
    status = 413


class TooManyRequests(ApiError):
    """429: past a flood limit; nothing of the request was stored."""
    status = 429


class UnsupportedMediaType(ApiError):
    """415: an unsupported Content-Type or Content-Encoding."""
    status = 415


# A capability's own error class and the ApiError it is answered as
# (server/handlers/domain_errors.py holds the table).
DomainStatuses = tuple[tuple[type[Refusal], type["ApiError"]], ...]


def api_error(error: Exception, domain: DomainStatuses = ()) -> ApiError | None:
    """The API's answer to `error`: itself when an ApiError, the mapped one when a
    capability's own (a server/refusal.py Refusal), else None."""
    if isinstance(error, ApiError):
        return error
    for raised, answered in domain:
        if isinstance(error, raised):
            mapped = answered(error.message, error.retry_after_seconds)
            mapped.details = error.details
            return mapped
    return None


def json_response(body: object, status: int = 200,
                  headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, headers=headers,
                        content_type="application/json")


def error_response(status: int, message: str,
                   headers: dict[str, str] | None = None) -> web.Response:
    return json_response({"error": message}, status=status, headers=headers)


class ErrorAnswers:
    """The JSON answer to whatever a handler raised (`unavailable_status` when the database
    is away: 503, or 500 where the contract says so; `domain`: the capabilities' own errors
    and the statuses they are answered with)."""

    def __init__(self, retry_after_seconds: int, unavailable_status: int = 503,
                 domain: DomainStatuses = ()) -> None:
        self._domain = domain
        self._retry_after = {"Retry-After": str(retry_after_seconds)}
        self._unavailable_status = unavailable_status
        self._unavailable_log = UnavailableLog()

    def answer(self, request: web.Request, error: Exception) -> web.StreamResponse:
        """The response for `error`; an aiohttp redirect or 304 is raised again."""
        if (api := api_error(error, self._domain)) is not None:
            response = json_response({"error": api.message, **(api.details or {})},
                                     api.status, api.headers)
            if api.close_connection:
                response.force_close()
            return response
        if isinstance(error, DatabaseUnavailable):
            self._unavailable_log.add(request, error)
            if error.stored_unknown:
                return json_response({"error": str(error), "stored": "unknown"},
                                     self._unavailable_status, self._retry_after)
            return error_response(self._unavailable_status, "database unavailable, retry later",
                                  self._retry_after)
        if isinstance(error, web.HTTPException):
            if error.status < 400:
                raise error
            return error_response(error.status, error.reason, _passed_headers(error))
        log.exception("%s %s failed", request.method, request.path, exc_info=error)
        return error_response(500, "internal server error")


def error_middleware(retry_after_seconds: int, unavailable_status: int = 503,
                     domain: DomainStatuses = ()):
    """A sub-application's own error answers (the notification API's 500s)."""
    errors = ErrorAnswers(retry_after_seconds, unavailable_status, domain)

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except Exception as error:
            return errors.answer(request, error)

    return middleware


def _passed_headers(error: web.HTTPException) -> dict[str, str]:
    return {name: value for name, value in error.headers.items()
            if name in ("Allow", "Retry-After")}
