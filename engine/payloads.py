"""Payload serialisation, one place: canonical JSON, its ETag, and the stored gzip form."""

from __future__ import annotations

import gzip
import hashlib

import orjson

GZIP_LEVEL = 6


def serialize(payload: object) -> tuple[bytes, str]:
    """Canonical JSON (sorted keys) and its content hash, used as ETag and change detector."""
    canonical = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    return canonical, hashlib.sha256(canonical).hexdigest()[:32]


def pack(payload: object) -> tuple[bytes, str]:
    """The stored form: gzip of the canonical JSON (mtime 0, so equal content gives equal
    bytes), and the ETag of the JSON."""
    canonical, etag = serialize(payload)
    return gzip.compress(canonical, compresslevel=GZIP_LEVEL, mtime=0), etag

