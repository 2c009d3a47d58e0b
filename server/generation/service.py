"""The generation queue of one server process: claim due routers, buffer them, generate each
in the worker pool; and `generate_once` for the `rulegen` command.

- A dispatcher claims due routers (never-generated first, then by due time) into a buffer of
  RULE_GENERATION_QUEUE_CAPACITY; it polls every RULE_GENERATION_POLL_SECONDS when idle and
  is woken at once when a router registers in this process.
- RULE_GENERATION_MAX_CONCURRENT tasks take routers from the buffer and hand each to a pool
  worker (server/generation/task.py).
- Every outcome ends the claim: success completes it (in the worker, with the payloads),
  LeaseLost leaves the router to the process that took it over, and any other outcome (the
  database unavailable, an exception from the engine, a timeout, no ruleset) reschedules it
  with backoff and records `last_error`. When even that cannot reach the database, the
  renewal loop records it once the database is back.
- The process claims a router for CLAIM_LEASE and renews, every RENEW_SECONDS, only the
  claims of routers being generated now, so a claim outlives neither its generation (at most
  the command timeout) by more than one lease nor a process that died (SIGKILL, power loss);
  other processes then take those routers over. A buffered router whose claim ran out is
  dropped by the worker's first statement (LeaseLost), which renews only a live claim, and
  claimed again by the next dispatch unless another process has it.
- Nothing is generated while no ruleset is published.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta

from engine.generate import PayloadLimits
from engine.pool import WorkerPool
from ruledata.workspace import Workspace
from server.background import (BackgroundTasks, UnrecordedOutcomes, pause, process_name,
                               raise_if_cancelled)
from server.routers import sql as router_db
from server.db.pool import Database, DatabaseUnavailable
from server.generation import sql as queue
from server.generation.sql import LeaseLost
from server.generation.task import RouterGenerated, RouterTask, generate_and_store
from server.metrics import Metrics
from server.settings import Settings

log = logging.getLogger("router_backend.generation")

CLAIM_LEASE = timedelta(seconds=60)
RENEW_SECONDS = 20

GenerationPool = WorkerPool[RouterTask, RouterGenerated]


class GenerationRefused(Exception):
    """The router cannot be generated now (no ruleset, not registered, held elsewhere)."""


class GenerationFailed(Exception):
    """The generation did not produce payloads. `rescheduled`: the router's claim was ended
    with backoff and `last_error` recorded; False when the database could not be reached to
    do so (the claim then runs out by itself)."""

    def __init__(self, reason: str, rescheduled: bool):
        super().__init__(reason)
        self.reason = reason
        self.rescheduled = rescheduled


def failure_reason(error: BaseException) -> str:
    """What `last_error` records: the exception's type and first line."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def reschedule(db: Database, owner: str, mac: str, interval: timedelta,
                     reason: str) -> bool:
    """End `owner`'s claim on a failed router, with backoff; False when the database is away."""
    try:
        await queue.fail(db, owner, mac, interval, reason)
        return True
    except DatabaseUnavailable:
        return False


@dataclass(frozen=True)
class GenerationConfig:
    workers: int
    capacity: int
    interval: timedelta
    timeout: float
    poll_seconds: float
    window: timedelta
    block_severity: int
    limits: PayloadLimits
    rules_filename: str
    workspace: Workspace
    db_timeout: float

    @classmethod
    def from_settings(cls, settings: Settings) -> "GenerationConfig":
        return cls(
            workers=settings.rule_generation_max_concurrent,
            capacity=settings.rule_generation_queue_capacity,
            interval=timedelta(seconds=settings.rule_generation_interval_seconds),
            timeout=settings.rule_generation_command_timeout_seconds,
            poll_seconds=settings.rule_generation_poll_seconds,
            window=timedelta(days=settings.rule_generation_telemetry_days),
            block_severity=settings.rule_generation_block_severity,
            limits=PayloadLimits(settings.rule_generation_sample_count,
                                 settings.rule_generation_firewall_max_entries,
                                 settings.rule_generation_fired_percent / 100,
                                 settings.rule_generation_block_min_alerts,
                                 settings.rule_generation_fleet_percent / 100),
            rules_filename=settings.rule_generation_rules_filename,
            workspace=Workspace(settings.rule_data_path),
            db_timeout=settings.db_timeout_seconds)

    @property
    def one_off_lease(self) -> timedelta:
        """For a generation that nobody renews (rulegen): outlasts the timeout."""
        return timedelta(seconds=self.timeout + 60)

    def rules_file(self, mac: str) -> str:
        return str(self.workspace.idps_rules / self.rules_filename.format(
            mac=mac.replace(":", "-")))


def generation_pool(workers: int, timeout: float, start_method: str = "spawn"
                    ) -> GenerationPool:
    return WorkerPool(generate_and_store, workers, timeout, start_method)


async def generate_router(db: Database, pool: GenerationPool, config: GenerationConfig,
                          owner: str, mac: str, lease: timedelta) -> RouterGenerated:
    """One router, start to finish, in a pool worker, under `owner`'s lease. Raises LeaseLost
    (another owner has the router; nothing to end) or GenerationFailed for any other failure,
    after rescheduling the router (see GenerationFailed)."""
    try:
        version_dir = config.workspace.current_version_dir()
        if version_dir is None:
            raise GenerationRefused("no ruleset published yet; run rulepreprocess")
        return await pool.run(RouterTask(
            db.location, owner, mac, str(version_dir), config.rules_file(mac), lease,
            config.window, config.block_severity, config.interval, config.limits,
            config.db_timeout))
    except LeaseLost:
        raise
    except Exception as error:  # a timeout, the database, the engine: all end the claim
        reason = failure_reason(error)
        rescheduled = await reschedule(db, owner, mac, config.interval, reason)
        raise GenerationFailed(reason, rescheduled) from error


async def generate_once(db: Database, config: GenerationConfig, mac: str,
                        start_method: str = "fork") -> RouterGenerated:
    """Generate one router now, outside the queue (the `rulegen` command), in a worker of its
    own, under a lease that outlasts the timeout. GenerationRefused when the router is not
    registered, no ruleset is published, or a server is generating it at this moment;
    GenerationFailed or LeaseLost when the generation itself failed."""
    if not await router_db.is_registered(db, mac):
        raise GenerationRefused(f"router {mac} is not registered")
    if config.workspace.current_version_dir() is None:
        raise GenerationRefused("no ruleset published yet; run rulepreprocess first")
    owner = f"rulegen@{process_name()}"
    if not await queue.claim_router(db, owner, mac, config.one_off_lease):
        raise GenerationRefused(f"router {mac} is being generated by a server right now; "
                                "try again shortly")
    pool = generation_pool(1, config.timeout, start_method)
    try:
        return await generate_router(db, pool, config, owner, mac, config.one_off_lease)
    finally:
        pool.close()


class GenerationService:
    def __init__(self, db: Database, pool: GenerationPool, config: GenerationConfig,
                 metrics: Metrics | None = None, owner: str | None = None):
        """`owner`: the name its claims go by (default: this process's)."""
        self._db = db
        self._metrics = metrics or Metrics()
        self._pool = pool
        self._config = config
        self._owner = owner or process_name()
        self._buffer: asyncio.Queue[str] = asyncio.Queue(config.capacity)
        self._held: set[str] = set()  # claimed by us: buffered or being generated
        self._running: set[str] = set()  # being generated: the claims renewed
        # Routers whose failure could not be recorded (the database away): the reason.
        self._unrecorded = UnrecordedOutcomes(self._record_failure)
        self._wake = asyncio.Event()
        self._dispatcher: asyncio.Task | None = None
        self._tasks = BackgroundTasks()
        self._dispatch_health = self._metrics.loop_health("generation-dispatch", log)
        self._renew_health = self._metrics.loop_health("generation-renew", log)
        self.generated = 0

    @property
    def workers(self) -> int:
        return self._config.workers

    def start(self) -> None:
        self._dispatcher = self._tasks.spawn(self._dispatch(), "generation-dispatch")
        self._tasks.spawn(self._renew(), "generation-renew")
        for number in range(self._config.workers):
            self._tasks.spawn(self._work(), f"generation-worker-{number}")

    def wake(self) -> None:
        """A router just registered here: look for due routers now."""
        self._wake.set()

    async def stop(self, grace_seconds: float) -> bool:
        """Claim nothing more, hand buffered routers back to the other processes, and let the
        routers being generated finish, for up to `grace_seconds`. Returns False when some
        were still running (their workers should then be killed; their leases expire)."""
        self._dispatcher.cancel()
        buffered = []
        while not self._buffer.empty():
            buffered.append(self._buffer.get_nowait())
            self._held.discard(buffered[-1])
            self._buffer.task_done()
        for mac in buffered:
            try:
                await queue.release(self._db, self._owner, mac)
            except DatabaseUnavailable:
                break  # their leases expire by themselves
        try:
            await asyncio.wait_for(self._buffer.join(), grace_seconds)
            finished = True
        except asyncio.TimeoutError:
            log.warning("generations still running after %ss; stopping them", grace_seconds)
            finished = False
        await self._tasks.stop()
        return finished

    async def _dispatch(self) -> None:
        while True:
            raise_if_cancelled()
            claimed = 0
            free = self._config.capacity - self._buffer.qsize()
            try:
                if free > 0 and self._config.workspace.current_version_dir() is not None:
                    for mac in await queue.claim_due(self._db, self._owner, free,
                                                     CLAIM_LEASE):
                        self._unrecorded.forget(mac)
                        if mac not in self._held:  # its claim ran out while buffered
                            self._held.add(mac)
                            self._buffer.put_nowait(mac)
                        claimed += 1
                self._dispatch_health.succeeded()
            except DatabaseUnavailable as error:
                self._dispatch_health.failed(error)
            if claimed and claimed == free:
                await self._buffer.join()  # full: wait for room rather than poll
                continue
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self._config.poll_seconds)
            except asyncio.TimeoutError:
                pass

    async def _renew(self) -> None:
        while True:
            await pause(RENEW_SECONDS)
            try:
                await queue.renew_claims(self._db, self._owner, sorted(self._running),
                                         CLAIM_LEASE)
                await self._unrecorded.record()
                self._renew_health.succeeded()
            except DatabaseUnavailable as error:
                self._renew_health.failed(error)

    async def _record_failure(self, mac: str, reason: str) -> None:
        await queue.fail(self._db, self._owner, mac, self._config.interval, reason)

    async def _work(self) -> None:
        while True:
            raise_if_cancelled()
            mac = await self._buffer.get()
            self._running.add(mac)
            try:
                await self._generate(mac)
            finally:
                self._running.discard(mac)
                self._held.discard(mac)
                self._buffer.task_done()

    async def _generate(self, mac: str) -> None:
        try:
            result = await generate_router(self._db, self._pool, self._config, self._owner,
                                           mac, CLAIM_LEASE)
        except LeaseLost:  # our lease ran out: claimed again when due, here or elsewhere
            self._metrics.generations.labels("lease_lost").inc()
            log.info("generation for %s dropped: its lease ran out", mac)
            return
        except GenerationFailed as error:
            self._metrics.generations.labels("failed").inc()
            if not error.rescheduled:
                self._unrecorded.keep(mac, error.reason)
            log.warning("generation for %s failed: %s%s", mac, error.reason,
                        "" if error.rescheduled else " (recorded once the database is back)")
            return
        self.generated += 1
        self._metrics.generations.labels("succeeded").inc()
        self._metrics.generation_seconds.observe(result.seconds)
        log.info("generated %s: %s rules (%s from its alerts), %s firewall entries in %.3fs",
                 mac, result.stats["rules"], result.stats["from_alerts"],
                 result.stats["firewall_entries"], result.seconds)
