"""Telemetry ingestion: a request body streamed into compressed chunks. `body.py` decodes
(gzip, size cap), `records.py` splits (NDJSON, JSON array), `ingest.py` runs one request as
one transaction (each record checked by server/telemetry/extract.py and written by
server/telemetry/writer.py), `idempotency.py` checks an upload's Idempotency-Key and answers
a repeat, `slots.py` caps the uploads in progress per router and per client address,
`turns.py` hands the ingestion pool's connections to the waiting uploads, the router
served the fewest records lately first, `tally.py` counts accepted and rejected records per
minute for `router-backend status`; `errors.py` says why an upload is refused, in
ingestion's words (the web layer turns each into a status)."""
