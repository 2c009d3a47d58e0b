"""Database access.

- The pool and its error mapping (`pool.py`), connections made alike for the pool and the
  blocking code, through psycopg 3 (`connect.py`), where the database is (`location.py`), bringing
  it up (`lifecycle.py`, `embedded.py`, `migrate.py`: migrations and the schema check), time
  partitions (`partitions.py`), which tables the Citus mode distributes (`citus.py`, for
  retention; distributing them is ops/citus_nodes.py's). Backups and their restore are the
  commands' (ops/pg_backup.py).
- The SQL of the tables several capabilities share: `routers.py` (registrations and their
  per-address limit), `router_keys.py` (key hashes, enrollment windows), `rules.py` (payloads
  and activations), `activation_days.py` (activations rolled up by day, the watermark),
  `applied.py` (what routers loaded), `telemetry.py` (an upload's commit in doubt settled),
  `chunks.py` (the statements of telemetry chunks and summaries: store, export,
  compaction), `upload_keys.py` (the uploads' idempotency keys),
  `notifications.py` and `notification_keys.py` (the notification records and idempotency
  keys), `allowlist.py` and `overrides.py` (the operators' firewall allowlist and rule
  overrides), `tuning_changes.py` (the record of operators' changes), `reports.py` (access
  reports), `status.py` (the fleet at a glance), `console.py` (what the console reads: one
  router's story, the fleet's hourly charts), `console_sessions.py` (who is signed in),
  `leases.py` (leased work: the one mechanism of claims, renewals, outcomes, backoff), `generation.py` (the generation queue's leases,
  and the statements of a generation worker), `jobs.py` (scheduled jobs' ticks as leased
  work, exclusive locks and run records), `traffic.py` (the fleet's uploads and polls per
  minute), `fleet.py` (the fleet job's counting over every router's alerts, its lists),
  `hunt.py` (the hunt index's postings, the hunts that read them, the record of hunts),
  `channels.py` (the change feed's channels, each NOTIFY by name), `intel.py` (threat feeds, their delivery with its rails, sightings, owners, the record),
  `service_settings.py` (the settings the running service started with, for its commands).

The SQL of the service is here (the commands' cluster administration, Citus nodes and
backups, is under ops/), with these exceptions: retention's DDL and batched deletes, built
from partition names (server/jobs/retention.py); the ETag cache's LISTEN and heartbeat; the
health check's `SELECT 1`; the supervisor's max_connections check.
"""
