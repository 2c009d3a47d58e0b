"""`POST /rules/applied`: an agent reports what it loaded, so operators can see routers whose
rules lag behind or failed to load (`router-backend status`). Optional for agents.

Body: `{"ids_etag": ..., "firewall_etag": ..., "ok": true|false, "detail": "..."}`. An ETag is
taken as the agent got it (`W/"abc"`) or bare (`abc`); either may be null (not loaded).
"""

from __future__ import annotations

import asyncio
import re

import orjson
from aiohttp import StreamReader

from server.routers.errors import ReportInvalid, ReportStalled, ReportTooLarge
from server.text import is_plain_text

MAX_BODY_BYTES = 8 * 1024
IDLE_SECONDS = 15  # a report's body may pause this long between chunks
MAX_ETAG = 128
# What an ETag header holds (RFC 9110's etagc, the W/ and quotes included): visible ASCII;
# the API document gives the same pattern, so a report it allows is one the handler takes.
ETAG_PATTERN = f"^[!-~]{{1,{MAX_ETAG}}}$"
ETAG_TEXT = re.compile(ETAG_PATTERN.strip("^$"))
MAX_DETAIL = 1000
FIELDS = {"ids_etag", "firewall_etag", "ok", "detail"}


async def read_report(content: StreamReader, content_length: int | None
                      ) -> tuple[str | None, str | None, bool, str | None]:
    """The report in a request's body (its stream and declared length)."""
    body = await read_json(content, content_length, MAX_BODY_BYTES)
    if not isinstance(body, dict):
        raise ReportInvalid("body must be a JSON object")
    if unknown := set(body) - FIELDS:
        raise ReportInvalid(f"unknown fields: {', '.join(sorted(unknown))}")
    ok = body.get("ok")
    if not isinstance(ok, bool):
        raise ReportInvalid("ok: expected true or false")
    detail = body.get("detail")
    if detail is not None and (not isinstance(detail, str) or len(detail) > MAX_DETAIL):
        raise ReportInvalid(f"detail: expected a string of at most {MAX_DETAIL} characters")
    if detail is not None and not is_plain_text(detail):
        # Kept as plain text (`router-backend status` prints it on an operator's terminal):
        # a control or format character becomes U+FFFD. Taken rather than refused: a
        # failing agent's last line of output is what an operator needs, whatever it holds.
        detail = "".join(c if is_plain_text(c) else "\ufffd" for c in detail)
    return _etag(body, "ids_etag"), _etag(body, "firewall_etag"), ok, detail


async def read_json(content: StreamReader, content_length: int | None, max_bytes: int):
    """A router's JSON report of at most `max_bytes` (applied, enforced), decoded."""
    if content_length is not None and content_length > max_bytes:
        raise ReportTooLarge(f"a report is at most {max_bytes} bytes")
    chunks, size = [], 0
    while chunk := await _next_chunk(content):
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise ReportTooLarge(f"a report is at most {max_bytes} bytes")
    try:
        return orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError:
        raise ReportInvalid("body is not valid JSON") from None


async def _next_chunk(content: StreamReader) -> bytes:
    try:
        async with asyncio.timeout(IDLE_SECONDS):
            return await content.readany()
    except TimeoutError:
        raise ReportStalled(f"body stalled: nothing received for {IDLE_SECONDS} s") from None


def _etag(body: dict, field: str) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not ETAG_TEXT.fullmatch(value):
        raise ReportInvalid(f"{field}: expected an ETag of at most {MAX_ETAG} characters, visible "
                         "ASCII (as the payload's ETag header was sent)")
    return value.removeprefix("W/").strip('"')
