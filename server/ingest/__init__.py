"""Telemetry ingestion: a request body streamed into batched inserts. `body.py` decodes
(gzip, size cap), `records.py` splits (NDJSON, JSON array), `extract.py` validates a record
into a row, `ingest.py` runs one request as one transaction."""
