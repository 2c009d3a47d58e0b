"""The service: the HTTP app (router API, notification API, operations endpoints) and the
capabilities behind it, in layers, each importing only the layers below it (the
`server-layers` contract of .importlinter, checked by `lint-imports` in CI):

1. The assembly: `app.py` (settings in, the aiohttp application out: routes, middleware,
   one cleanup context per resource) and `process/` (the supervisor of several HTTP
   workers, serving until SIGTERM and draining).
2. The HTTP faces: `handlers/` (router API, notification API, operations endpoints, the
   API document) and `console/` (the web console for support and operators).
3. `typedefs.py`: the application's typed keys.
3b. `intel/`: threat intelligence, which composes capabilities below it (feeds fetched,
   retro-hunted over the hunt index, sightings told to owners through notifications).
4. The capabilities, none importing another: `ingest/` (streamed telemetry ingestion),
   `generation/` (the per-router generation queue), `jobs/` (cron runner, preprocess,
   partitions, retention, compaction), `notify/` (email notifications), `polling/` (the
   ETag cache and the documents every router gets the same), `tuning/` (operators' overrides, allowlist and enrollment resets),
   `hunt/` (which routers saw an indicator across the fleet, each hunt recorded),
   `status.py` (the fleet at a glance).
5. What capabilities share: `routers/` (router identity, registration, keys, applied
   reports) and `telemetry/` (telemetry at rest: compressed chunks, hourly summaries,
   compaction, export).
6. Shared plumbing: `web/` (what every request passes through: routes wrapped in the one
   middleware, client address, flood limits, requests in flight, access log),
   `idempotency_key.py`, `changes.py` (the one change feed: the LISTEN connection every
   in-memory cache and document follows),
   `errors.py` (the JSON error shape), `metrics.py` (Prometheus), `logs.py`,
   `exposure.py` (a public listener starts only with each exposure chosen), then
   `background.py` (the name leases are taken under, long-running tasks, their health).
7. `db/`: the connection pool, schema, migrations and the SQL of every table.
8. `settings.py` (the one settings object), `text.py`, `timestamps.py`.

Layer of the whole tree: imports engine and ruledata (below it), never ops (above it).
"""

SERVICE_VERSION = "1.0.0"
