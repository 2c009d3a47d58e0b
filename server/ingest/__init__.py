"""Telemetry ingestion: a request body streamed into batched inserts. `body.py` decodes
(gzip, size cap), `records.py` splits (NDJSON, JSON array), `extract.py` validates a record
into a row, `ingest.py` runs one request as one transaction, `idempotency.py` checks an
upload's Idempotency-Key and answers a repeat, `slots.py` caps the uploads in progress per
router and per client address, `tally.py` counts accepted and rejected records per minute
for `router-backend status`."""
