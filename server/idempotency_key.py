"""The `Idempotency-Key` request header, as the notification sends and the telemetry uploads
take it: at most one, 1 to 255 printable ASCII characters, bare or in the quoted form of
the IETF draft (a structured-field string, `"..."`), which is taken without its quotes."""

from __future__ import annotations

import re

from multidict import CIMultiDictProxy

from server.refusal import Refusal

HEADER = "Idempotency-Key"
MAX_CHARS = 255
_KEY = re.compile(r"[\x20-\x7e]{1,%d}" % MAX_CHARS)  # printable ASCII


class KeyInvalid(Refusal):
    """The request's Idempotency-Key cannot be used (several, or not printable ASCII)."""


def idempotency_key(headers: CIMultiDictProxy[str]) -> str | None:
    """The request's key, None without one; KeyInvalid when it is not a usable key."""
    values = headers.getall(HEADER, [])
    if not values:
        return None
    if len(values) > 1:
        raise KeyInvalid(f"send at most one {HEADER} header")
    key = values[0]
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not _KEY.fullmatch(key):
        raise KeyInvalid(f"{HEADER} must be 1 to {MAX_CHARS} printable ASCII characters")
    return key
