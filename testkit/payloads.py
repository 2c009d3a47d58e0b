"""Rule payloads as tests store and read them, through the service's own packing."""

from __future__ import annotations

import gzip

import orjson

from engine.payloads import pack
from server.db.pool import Database
from server.generation.rules_sql import store_payloads


async def store_payload_objects(db: Database, mac: str, payloads: dict[str, object]) -> None:
    """Pack and store payloads given as JSON-able objects (kind -> payload), as generation
    stores them."""
    packed = {kind: pack(body) for kind, body in payloads.items()}
    await store_payloads(db, mac, packed)


def unpack(stored: bytes) -> object:
    """A stored payload (gzip of the canonical JSON) as an object."""
    return orjson.loads(gzip.decompress(stored))
