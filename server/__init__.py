"""The service: the HTTP app (router API, notification API, operations endpoints) and the
capabilities behind it, each in one package or module:

- `app.py` (the app factory, one cleanup context per resource), `settings.py`, `typedefs.py`
  (app keys), `errors.py` (the JSON error shape), `metrics.py`, `shutdown.py`;
- `handlers/` (thin HTTP handlers), `identity.py` and `mac.py` (who a router is);
- `ingest/` (streamed telemetry ingestion), `etag_cache.py` (304s from memory);
- `generation/` (the per-router generation queue), `jobs/` (cron runner, preprocess and
  retention jobs), `notify/` (email notifications);
- `db/` (the connection pool, schema, migrations and the SQL of the shared tables).

Layer: imports engine and ruledata (below it), never ops (above it); see .importlinter.
"""

SERVICE_VERSION = "1.0.0"
