"""The upload-keys job: every hour, delete the telemetry uploads' Idempotency-Keys older than
INGEST_IDEMPOTENCY_KEY_DAYS, in short batched statements (server/telemetry/upload_key_sql.py), so
no long DELETE ever holds up ingestion. Scheduled in every deployment: keys are the
service's own bookkeeping, whatever DATA_RETENTION_ENABLED says of telemetry."""

from __future__ import annotations

from server.telemetry import upload_key_sql as upload_keys
from server.db.pool import Database

UPLOAD_KEYS_CRON_SCHEDULE = "47 * * * *"


async def expire_upload_keys(db: Database, days: int) -> dict:
    return {"deleted": await upload_keys.expire(db, days)}
