"""Idempotency keys of telemetry uploads (migration 0016): what a router's upload with a key
stored, so that a retry is answered the same without storing again.

The key's row is written first among the upload's last statements, in the transaction of its
records (TelemetryWriter.commit): a second upload with the key fails on its primary key
(after waiting for the first's transaction, when that is still open), which rolls back
everything it wrote, and is answered from the key's row.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

import orjson
import psycopg

from server.db.pool import Database

BATCH_ROWS = 5_000
PAUSE_SECONDS = 0.01  # between batches of the expiry: lets ingestion's statements through

# The first of the statements that store a request's last batch (sent together: one round
# trip). A key recorded before fails it with a unique violation of KEY_CONSTRAINT.
INSERT_KEY = """INSERT INTO upload_keys (mac, kind, key, fingerprint, answer)
VALUES (%(mac)s, %(kind)s, %(key)s, %(fingerprint)s, %(answer)s)"""
KEY_CONSTRAINT = "upload_keys_pkey"


_CONSTRAINT_NAMED = re.compile(r'unique constraint "([^"]+)"')


def key_recorded_before(error: psycopg.errors.UniqueViolation) -> bool:
    """Whether the violation is INSERT_KEY's: the key's constraint, or under Citus its
    shard's (`upload_keys_pkey_<shard id>`), which Citus names only in the message (the
    error it relays from a worker carries no constraint field)."""
    name = error.diag.constraint_name
    if name is None and (named := _CONSTRAINT_NAMED.search(str(error))):
        name = named.group(1)
    return name is not None and (name == KEY_CONSTRAINT or name.startswith(f"{KEY_CONSTRAINT}_"))

RECORDED = """SELECT fingerprint, answer FROM upload_keys
WHERE mac = %(mac)s AND kind = %(kind)s AND key = %(key)s"""

# Batches by key, not by `ctid` (which under Citus names a row only within one shard).
_EXPIRE = """DELETE FROM upload_keys WHERE (mac, kind, key) IN (
    SELECT mac, kind, key FROM upload_keys WHERE created_at < now() - %(days)s * interval '1 day'
    LIMIT %(batch)s)"""


@dataclass(frozen=True)
class UploadKey:
    """One upload's key, with the SHA-256 of its decoded body and the answer it was given."""
    mac: str
    kind: str
    key: str
    fingerprint: bytes
    answer: dict

    def params(self) -> dict:
        return {"mac": self.mac, "kind": self.kind, "key": self.key,
                "fingerprint": self.fingerprint, "answer": orjson.dumps(self.answer).decode()}


@dataclass(frozen=True)
class Recorded:
    fingerprint: bytes
    answer: dict


async def recorded(db: Database, mac: str, kind: str, key: str) -> Recorded | None:
    row = await db.fetchone(RECORDED, {"mac": mac, "kind": kind, "key": key})
    if row is None:
        return None
    fingerprint, answer = row
    return Recorded(bytes(fingerprint), answer)


async def expire(db: Database, days: int, batch_rows: int = BATCH_ROWS) -> int:
    """Delete the keys older than `days`, in short statements of `batch_rows`."""
    deleted = 0
    while True:
        removed = await db.execute(_EXPIRE, {"days": days, "batch": batch_rows})
        deleted += removed
        if removed < batch_rows:
            return deleted
        await asyncio.sleep(PAUSE_SECONDS)
