"""The Idempotency-Key of a telemetry upload (its form: server/idempotency_key.py): the
body's fingerprint, and the answer to a repeat.

An agent sends one key per batch (for example its file's identity and byte range). A repeat
with the key and the same body is answered with the first answer and `Idempotent-Replayed:
true`, storing nothing; the key with another body is 422. Keys are per router and endpoint
(events, cfm), and expire after INGEST_IDEMPOTENCY_KEY_DAYS.
"""

from __future__ import annotations

import hashlib

from server.telemetry.upload_key_sql import Recorded
from server.ingest.errors import BatchKeyReused
from server.idempotency_key import HEADER

REPLAYED_HEADER = "Idempotent-Replayed"


def body_fingerprint(content_type: str) -> "hashlib._Hash":
    """A hash to feed the decoded body to; the content type is part of it, since the same
    bytes are other records as a JSON array and as NDJSON."""
    return hashlib.sha256(content_type.encode() + b"\n")


def replayed_answer(earlier: Recorded, fingerprint: bytes, key: str) -> dict:
    """The first answer given for `key`, when this body is the one it was given for."""
    if earlier.fingerprint != fingerprint:
        raise BatchKeyReused(f"{HEADER} {key!r} was used for another body; a new batch "
                            "needs a new key")
    return earlier.answer
