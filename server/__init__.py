"""The service: the HTTP app (router API, notification API, operations endpoints) and the
capabilities behind it. The map:

- `web/`: the HTTP application (`app.py`, the factory) and what every request passes
  through (client address, flood limits, requests in flight, access log, the API document).
- `handlers/`: thin HTTP handlers of the router API, the notification API and the
  operations endpoints.
- `polling/`: the ETag cache, the one 304 decision and the connections that answer a poll
  as its head is parsed (the one place that uses aiohttp's private API).
- `routers/`: router identity, registration, per-router keys, applied reports.
- `ingest/` (streamed telemetry ingestion), `telemetry/` (telemetry at rest: compressed
  chunks, hourly summaries, compaction, export), `generation/` (the per-router generation queue),
  `jobs/` (cron runner, preprocess, partitions, retention and upload-keys jobs), `notify/`
  (email notifications), `tuning/` (operators' overrides, allowlist and enrollment resets,
  checked and recorded), `console/` (the web console for support and operators): the
  capabilities.
- `process/`: the supervisor, the drain on SIGTERM, background tasks and their health.
- `db/`: the connection pool, schema, migrations and the SQL of every table.
- Shared by all: `settings.py` (the one settings object), `typedefs.py` (app keys),
  `errors.py` (the JSON error shape, 503s logged once in a while), `metrics.py`
  (Prometheus), `logs.py` (logging: batched to stderr, or the operator's LOG_CONFIG),
  `text.py` (what counts as plain text), `timestamps.py` (ISO 8601 in UTC),
  `idempotency_key.py` (the Idempotency-Key header of sends and uploads), `status.py` (the
  fleet at a glance, for `router-backend status` and the console).

Layer: imports engine and ruledata (below it), never ops (above it); see .importlinter.
"""

SERVICE_VERSION = "1.0.0"
