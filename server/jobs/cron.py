"""The cron runner: jobs in the server's event loop, one run per tick across processes, one
log line and one `job_runs` row per run, retries after a failure.

A job is an async function returning a dict of details (logged and stored). It runs:
- on its cron tick, in the one process that claims the tick: each tick is a row of
  `job_ticks`, leased work (server/db/leases.py) claimed under JOB_LEASE and renewed while
  the job runs;
- once at start-up for a tick missed while no process ran (the latest tick since the
  database was installed that nobody added, when it is newer than the last one);
- never twice at once anywhere (a PostgreSQL advisory lock, also taken by the commands that
  run a job by hand);
- again after JOB_RETRY_DELAY_SECONDS when it failed, up to JOB_RETRY_ATTEMPTS times, by its
  claimant, or by any process once the claimant died (its lease run out: every process
  looks for such ticks every JOB_LEASE). A run whose outcome could not be recorded (the
  database away at its end) is run again the same way: a tick runs at least once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Awaitable, Callable

from cronsim import CronSim

from server.background import BackgroundTasks, LoopHealth, pause, process_name
from server.db import leases
from server.db.pool import Database
from server.db import jobs as ledger
from server.metrics import Metrics

log = logging.getLogger("router_backend.jobs")

JobFunction = Callable[[], Awaitable[dict]]
JOB_LEASE = timedelta(seconds=60)


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
        self._schedule: dict[str, tuple[str, JobFunction]] = {}
        self._health: dict[str, LoopHealth] = {}
        self._runs = BackgroundTasks()
        self._taking_up: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)  # per job
        self.claimant = f"{process_name()}:{uuid.uuid4().hex[:8]}"  # of its tick claims

    @property
    def names(self) -> list[str]:
        return list(self._schedule)

    def add(self, name: str, spec: str, function: JobFunction) -> None:
        self._health[name] = self._metrics.loop_health(f"job:{name}", log)
        self._runs.spawn(self._every_tick(name, spec, function), f"job-{name}-schedule")
        self._schedule[name] = (spec, function)

    async def _every_tick(self, name: str, spec: str, function: JobFunction) -> None:
        """Each tick of `spec` (UTC) from now on, handled in a task of its own."""
        for tick in CronSim(spec, datetime.now(timezone.utc)):
            await pause((tick - datetime.now(timezone.utc)).total_seconds())
            self._runs.spawn(self._tick(name, function, tick), f"job-{name}")

    async def _look_for_due_ticks(self) -> None:
        """Every JOB_LEASE, ticks whose claimant died before they were done."""
        while True:
            await pause(JOB_LEASE.total_seconds())
            for name, (_, function) in list(self._schedule.items()):
                if not self._taking_up[name].locked():  # (running here: not left by anyone)
                    await self._take_up(name, function)

    def spawn(self, coroutine, name: str) -> None:
        """Another long-running task of the jobs, stopped with them."""
        self._runs.spawn(coroutine, name)

    def catch_up(self) -> None:
        """Run each job once for a tick that passed while no process was running, and from
        now on look for ticks left by claimants that died."""
        self._runs.spawn(self._look_for_due_ticks(), "jobs-due-ticks")
        for name, (spec, function) in self._schedule.items():
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
        else:
            await self._take_up(name, function)  # one a claimant that died left

    async def _tick(self, name: str, function: JobFunction, tick: datetime) -> None:
        for attempt in range(self._retry_attempts + 1):
            if attempt:
                await pause(self._retry_delay)
            try:
                await ledger.add_tick(self._db, name, tick)
                break
            except Exception as error:  # e.g. the database is away: try again later
                log.error("job %s: tick %s not handled: %s", name, tick.isoformat(), error)
                self._metrics.job_runs.labels(name, "failed").inc()
        else:
            return
        await self._take_up(name, function)

    async def _take_up(self, name: str, function: JobFunction) -> None:
        """Claim the job's due tick, if any, and run it until it succeeds or its attempts are
        spent. One at a time per job in this process."""
        async with self._taking_up[name]:
            try:
                tick_id = await ledger.claim_tick(self._db, name, self.claimant, JOB_LEASE)
                if tick_id is not None:
                    await self._attempts(name, function, tick_id)
            except Exception as error:  # the database is away: the lease runs out, and
                log.error("job %s: due tick not handled: %s", name, error)  # it is taken up

    async def _attempts(self, name: str, function: JobFunction, tick_id: int) -> None:
        delay = timedelta(seconds=self._retry_delay)
        while True:
            outcome = await self._run_leased(name, function, tick_id)
            self._metrics.job_runs.labels(name, outcome.status).inc()
            if outcome.status != "failed":
                await ledger.finish_tick(self._db, tick_id, self.claimant)
                if outcome.status == "succeeded" and name in self._health:
                    self._health[name].succeeded()  # (tests tick unadded jobs)
                return
            if not await ledger.fail_tick(self._db, tick_id, self.claimant, outcome.error,
                                          delay, self._retry_attempts + 1):
                return
            await pause(self._retry_delay)
            if not await ledger.claim_again(self._db, tick_id, self.claimant, JOB_LEASE):
                return  # taken up by another process meanwhile

    async def _run_leased(self, name: str, function: JobFunction, tick_id: int) -> JobOutcome:
        """`run_job`, its tick's lease renewed all along; a failure to reach the database is
        the run's failure."""
        renewal = asyncio.create_task(self._renew(tick_id))
        try:
            return await run_job(self._db, name, function)
        except Exception as error:
            log.error("job %s: run not recorded: %s", name, error)
            return JobOutcome("failed", {}, str(error) or type(error).__name__)
        finally:
            renewal.cancel()

    async def _renew(self, tick_id: int) -> None:
        while True:
            await pause(JOB_LEASE.total_seconds() / 3)
            try:
                await leases.renew(self._db, ledger.TICKS, self.claimant, [tick_id], JOB_LEASE)
            except Exception as error:  # the next renewal may get through
                log.warning("job tick %s: lease not renewed: %s", tick_id, error)

    async def stop(self) -> None:
        await self._runs.stop()
