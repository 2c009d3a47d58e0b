"""The service: the HTTP app (router API, notification API, operations endpoints) and the
capabilities behind it, each in a folder with its SQL beside it (`sql.py`), in layers, each
importing only the layers below it (the `server-layers` contract of .importlinter, checked by
`lint-imports` in CI):

1. The processes and their assembly: `process/` (the supervisor, its children's own entry,
   serving until SIGTERM and draining) and `app.py` (settings and parts in, the aiohttp
   application out: routes, middleware, one cleanup context per resource).
2. The HTTP faces: `handlers/` (router API, notification API, operations endpoints, the
   API document) and `console/` (the web console for support and operators, its reads in
   console/sql.py).
3. `typedefs.py`: the application's typed keys.
4. What reads across capabilities: `status.py` (the fleet at a glance, each capability's
   part), `jobs/` (the cron runner and the scheduled jobs: preprocess, partitions,
   retention, compaction), `removal.py` (a router removed from every capability at once),
   `reports/` (each owner's weekly report of their routers: alerts, sightings, rules,
   contact, read from the summaries of telemetry, intel, generation and routers).
5. `feedback/`: owners' marks "not an attack" (the router's allowlist, overrides and
   sightings, and the fleet's holds by the networks marking a value); `enforcement/`: what
   the routers' firewalls dropped, as their agents report it, stored per router and day
   and counted for the fleet by networks.
6. The capabilities, each above those it uses:
   - `intel/` (threat intelligence: feeds retro-hunted over the hunt index, sightings told
     to owners through notifications) and `ingest/` (streamed telemetry ingestion, each
     upload announced to the hunt's queue);
   - `generation/` (the per-router generation queue, the stored payloads, what routers
     loaded), which reads the fleet's outbreaks;
   - `fleet/` (the fleet's attackers and outbreaks: the job, its explanation, the lists,
     the shared document), `hunt/` (which routers saw an indicator: the index, its packing,
     the hunts) and `notify/` (email notifications);
   - `polling/` (the ETag cache and the document every router gets the same);
   - `tuning/` (operators' overrides, allowlist and enrollment resets);
   - `routers/` (router identity, registration, keys) and `telemetry/` (telemetry at rest:
     compressed chunks, hourly summaries, compaction, export).
7. Shared plumbing: `web/` (what every request passes through: routes wrapped in the one
   middleware, client address, flood limits, requests in flight, access log),
   `idempotency_key.py`, `changes.py` (the one change feed: the LISTEN connection every
   in-memory cache and document follows),
   `errors.py` (the JSON error shape), `refusal.py` (what a capability raises when it
   refuses, with no status), `metrics.py` (Prometheus), `logs.py`,
   `exposure.py` (a public listener starts only with each exposure chosen), then
   `background.py` (the name leases are taken under, long-running tasks, their health).
8. `db/`: the database's own machinery (pool, connections, the embedded server, migrations,
   partitions, leases, Citus) and the tables several capabilities share.
9. `settings.py` (the one settings object), `text.py`, `timestamps.py`.

Layer of the whole tree: imports engine and ruledata (below it), never ops (above it).
"""

SERVICE_VERSION = "1.0.0"
