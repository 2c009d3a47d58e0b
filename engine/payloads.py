"""Payload serialisation: canonical JSON bytes and the ETag derived from them (one place)."""

from __future__ import annotations

import hashlib

import orjson


def serialize(payload: object) -> tuple[bytes, str]:
    """Canonical JSON (sorted keys) and its content hash, used as ETag and change detector."""
    canonical = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    return canonical, hashlib.sha256(canonical).hexdigest()[:32]
