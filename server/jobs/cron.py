"""The cron runner: jobs in the server's event loop, one run per tick across processes, one
log line and one `job_runs` row per run, retries after a failure.

A job is an async function returning a dict of details (logged and stored). It runs:
- on its cron tick, in the one process that claims the tick in `job_ticks`;
- once at start-up for a tick missed while no process ran (the latest tick since the
  database was installed that nobody claimed, when it is newer than the last claimed one);
- never twice at once anywhere (a PostgreSQL advisory lock, also taken by the commands that
  run a job by hand);
- again after JOB_RETRY_DELAY_SECONDS when it failed, up to JOB_RETRY_ATTEMPTS times.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable

from cronsim import CronSim

from server.background import BackgroundTasks, LoopHealth, pause, process_name
from server.db.pool import Database
from server.db import jobs as ledger
from server.metrics import Metrics

log = logging.getLogger("router_backend.jobs")

JobFunction = Callable[[], Awaitable[dict]]


class JobFailed(Exception):
    """An expected failure (the archive is unreachable ...): logged in one line, no trace."""


@dataclass
class JobOutcome:
    status: str        # succeeded, failed, skipped
    detail: dict
    error: str | None = None


async def run_job(db: Database, name: str, function: JobFunction,
                  log_failure: bool = True) -> JobOutcome:
    """Run once now, exclusively, recording the run. Never raises for the job's own failure.
    `log_failure` False: the caller logs the failure (in its own one line)."""
    started = time.perf_counter()
    async with ledger.exclusive(db, name) as acquired:
        if not acquired:
            log.info("job %s skipped: running elsewhere", name)
            return JobOutcome("skipped", {"reason": "running in another process"})
        run_id = await ledger.start_run(db, name)
        try:
            detail = await function()
        except Exception as error:  # the job failed; the service goes on
            message = str(error) or type(error).__name__
            if log_failure:
                log.error("job %s failed after %.2fs: %s", name, time.perf_counter() - started,
                          message,
                          exc_info=not isinstance(error, (JobFailed, ConnectionError, OSError)))
            await ledger.finish_run(db, run_id, "failed", error=message)
            return JobOutcome("failed", {}, message)
        await ledger.finish_run(db, run_id, "succeeded", detail)
    log.info("job %s succeeded in %.2fs: %s", name, time.perf_counter() - started, detail)
    return JobOutcome("succeeded", detail)


class CronJobs:
    """The server's scheduled jobs; started and stopped with the app."""

    def __init__(self, db: Database, retry_delay: float, retry_attempts: int,
                 metrics: Metrics | None = None):
        self._db = db
        self._metrics = metrics or Metrics()
        self._retry_delay = retry_delay
        self._retry_attempts = retry_attempts
        self._schedule: list[tuple[str, str, JobFunction]] = []
        self._health: dict[str, LoopHealth] = {}
        self._runs = BackgroundTasks()
        self.claimant = f"{process_name()}:{uuid.uuid4().hex[:8]}"  # of its tick claims
        self._last_tick: dict[str, datetime] = {}  # per job, the last tick it took up

    def add(self, name: str, spec: str, function: JobFunction) -> None:
        self._health[name] = self._metrics.loop_health(f"job:{name}", log)
        self._runs.spawn(self._every_tick(name, spec, function), f"job-{name}-schedule")
        self._schedule.append((name, spec, function))

    async def _every_tick(self, name: str, spec: str, function: JobFunction) -> None:
        """Each tick of `spec` (UTC) from now on, handled in a task of its own."""
        for tick in CronSim(spec, datetime.now(timezone.utc)):
            await pause((tick - datetime.now(timezone.utc)).total_seconds())
            self._runs.spawn(self._tick(name, function, tick), f"job-{name}")

    def spawn(self, coroutine, name: str) -> None:
        """Another long-running task of the jobs, stopped with them."""
        self._runs.spawn(coroutine, name)

    def catch_up(self) -> None:
        """Run each job once for a tick that passed while no process was running."""
        for name, spec, function in self._schedule:
            self._runs.spawn(self._catch_up(name, spec, function), f"job-{name}-catch-up")

    async def _catch_up(self, name: str, spec: str, function: JobFunction) -> None:
        now = datetime.now(timezone.utc)
        previous = next(CronSim(spec, now, reverse=True))
        try:
            last, installed = (await ledger.last_tick(self._db, name),
                               await ledger.installed_at(self._db))
        except Exception as error:  # the database is away: the next tick will do
            log.warning("job %s: could not look for a missed tick: %s", name, error)
            return
        if previous > (installed if last is None else max(last, installed)):
            log.info("job %s: tick %s was missed while the service was down; running it now",
                     name, previous.isoformat())
            await self._tick(name, function, previous)

    async def _tick(self, name: str, function: JobFunction, tick: datetime) -> None:
        if self._last_tick.get(name) == tick:
            return  # taken here already (a catch-up at the minute of a tick)
        self._last_tick[name] = tick
        claimed = False
        for attempt in range(self._retry_attempts + 1):
            if attempt:
                await pause(self._retry_delay)
            try:
                if not claimed:
                    if not await ledger.claim_tick(self._db, name, tick, self.claimant):
                        return  # another process has this tick
                    claimed = True
                status = (await run_job(self._db, name, function)).status
            except Exception as error:  # e.g. the database is away: try again later
                log.error("job %s: tick %s not handled: %s", name, tick.isoformat(), error)
                status = "failed"
            self._metrics.job_runs.labels(name, status).inc()
            if status != "failed":
                if status == "succeeded" and name in self._health:  # (tests tick unadded jobs)
                    self._health[name].succeeded()
                return

    async def stop(self) -> None:
        await self._runs.stop()
