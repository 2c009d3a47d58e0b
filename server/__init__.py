"""The service: the HTTP app (router API, notification API, operations endpoints) and the
capabilities behind it. The map:

- The app and its processes: `app.py` (the app factory, one cleanup context per resource),
  `settings.py` (the one settings object), `typedefs.py` (app keys), `errors.py` (the JSON
  error shape, 503s logged once in a while), `metrics.py` (Prometheus), `openapi.py` (the
  API document); `shutdown.py` (serve until SIGTERM, then drain), `in_flight.py` (requests in
  progress, for the drain), `supervisor.py` (HTTP workers and a background process),
  `background.py` (long-running tasks, their leases and health); `connection.py` (rules
  polls answered 304 as their head is parsed) and `access_log.py` (batched access lines).
- Routers: `handlers/` (thin HTTP handlers), `identity.py` and `mac.py` (who a router is,
  registration), `router_keys.py` (per-router keys, enrollment), `peers.py` (the client's
  address through trusted proxies, bearer tokens), `limits.py` (flood limits per router and
  per address), `applied.py` (what a router reports it loaded), `etag_cache.py` (payload
  ETags in memory, the one 304 decision).
- Capabilities: `ingest/` (streamed telemetry ingestion), `generation/` (the per-router
  generation queue), `jobs/` (cron runner, preprocess, partitions and retention jobs),
  `notify/` (email notifications).
- `db/`: the connection pool, schema, migrations and the SQL of the shared tables.
- Helpers: `text.py` (what counts as plain text), `timestamps.py` (ISO 8601 in UTC),
  `idempotency_key.py` (the Idempotency-Key header of sends and uploads).

Layer: imports engine and ruledata (below it), never ops (above it); see .importlinter.
"""

SERVICE_VERSION = "1.0.0"
