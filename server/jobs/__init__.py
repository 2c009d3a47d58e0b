"""Scheduled jobs: the cron runner and the jobs it runs.

- `cron.py`: cron ticks in the server's event loop, one run per tick across processes, one
  log line and one `job_runs` row per run, retries after a failure; `run_job` for the
  commands that run a job by hand (exclusive with the scheduled runs). Their bookkeeping
  in the database (tick claims, advisory locks, run records) is `server/db/jobs.py`.
- `preprocess.py`: the rule preprocess job (ruledata's pipeline with a pool of parsers);
  `first_ruleset.py`: a fresh install's first ruleset, soon after start-up.
- `partitions.py`: the hourly job that creates the coming days' time partitions.
- `retention.py`: the telemetry retention job.
- `upload_keys.py`: the hourly job that deletes expired Idempotency-Keys of uploads.
- `activation_days.py`: the hourly job that rolls activations before today up by day.
- `schedule.py`: which jobs a server process schedules, from the settings.

The fleet's job is server/fleet/job.py, the hunt's packing server/hunt/packing.py.

Imports: server.db, the capabilities whose jobs it schedules, engine (process pools),
ruledata; nothing from ops.
"""

# The most jobs `scheduled_jobs` adds (fleet and retention on); each running job holds a
# connection of its own, outside the pool, for its lock.
MOST_JOBS = 8
