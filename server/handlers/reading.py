"""What the API handlers read from a request alike: a JSON object body, a page's limit and
offset."""

from __future__ import annotations

import re

import orjson
from aiohttp import web

from server.errors import BadRequest

DEFAULT_LIMIT, MAX_LIMIT = 20, 100


async def json_object(request: web.Request) -> dict:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        raise BadRequest("body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def paging(request: web.Request) -> tuple[int, int]:
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
