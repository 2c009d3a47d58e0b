"""Database access: the database's own machinery, and the tables several capabilities share.
Each capability's SQL is in its own folder (server/hunt/sql.py, server/fleet/sql.py, ...).

- The pool and its error mapping (`pool.py`), connections made alike for the pool and the
  blocking code, through psycopg 3 (`connect.py`), multi-row VALUES statements bound a row
  at a time (`rows.py`), where the database is (`location.py`),
  bringing it up (`lifecycle.py`, `embedded.py`, `migrate.py`: migrations and the schema
  check), time partitions (`partitions.py`), catalog changes that need a table alone,
  taken with brief lock waits (`brief_locks.py`), partitions detached and dropped
  (`detach.py`: for retention and the packed flow summaries), which tables the Citus mode
  distributes (`citus.py`, for retention) and its nodes (`citus_nodes.py`: distributing the tables,
  adding, draining and rebalancing workers). Backups and their restore are the commands'
  (ops/pg_backup.py).
- Leased work (`leases.py`: the one mechanism of claims, renewals, outcomes, backoff) and
  scheduled jobs' ticks, exclusive locks and run records (`jobs.py`); the change feed's
  channels, each NOTIFY by name (`channels.py`); the settings the running service started
  with, for its commands (`service_settings.py`).
- The tables several capabilities share: `activation_days.py` (activations rolled up by day,
  the watermark), `telemetry.py` (an upload's commit in doubt settled), `tuning_changes.py`
  (the record of operators' changes: keys, allowlist, overrides), `reports.py` (access
  reports), `traffic.py` (the fleet's uploads and polls per minute), `status.py` (the fleet
  at a glance: the part read from these shared tables).
"""
