"""The generation queue of one server process: claim due routers, buffer them, generate each
in the worker pool; and `generate_once` for the `rulegen` command.

- A dispatcher claims due routers (never-generated first, then by due time) into a buffer of
  RULE_GENERATION_QUEUE_CAPACITY; it polls every RULE_GENERATION_POLL_SECONDS when idle and
  is woken at once when a router registers in this process.
- RULE_GENERATION_MAX_CONCURRENT tasks take routers from the buffer and hand each to a pool
  worker (server/generation/task.py). A failure reschedules the router with backoff.
- The process claims a router for CLAIM_LEASE and renews all its claims every RENEW_SECONDS
  while it lives, so the claims of a process that died (SIGKILL, power loss) run out within a
  minute and other processes take those routers over.
- Nothing is generated while no ruleset is published.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta

from engine.generate import PayloadLimits
from engine.pool import WorkerFailed, WorkerPool
from ruledata.workspace import Workspace
from server.background import BackgroundTasks, pause, process_name, raise_if_cancelled
from server.db import routers as router_db
from server.db.pool import Database, DatabaseUnavailable
from server.generation import queue
from server.generation.task import LeaseLost, RouterGenerated, RouterTask, generate_and_store
from server.metrics import Metrics
from server.settings import Settings

log = logging.getLogger("router_backend.generation")

CLAIM_LEASE = timedelta(seconds=60)
RENEW_SECONDS = 20

GenerationPool = WorkerPool[RouterTask, RouterGenerated]


class GenerationRefused(Exception):
    """The router cannot be generated now (no ruleset, not registered, held elsewhere)."""


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
                                 settings.rule_generation_block_min_alerts),
            rules_filename=settings.rule_generation_rules_filename,
            workspace=Workspace(settings.rule_data_path))

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
    """One router, start to finish, in a pool worker, under `owner`'s lease. Raises
    GenerationRefused (no ruleset: the router is released), WorkerFailed (the router is
    rescheduled with backoff), LeaseLost or DatabaseUnavailable."""
    version_dir = config.workspace.current_version_dir()
    if version_dir is None:
        await queue.release(db, owner, mac)
        raise GenerationRefused("no ruleset published yet; run rulepreprocess")
    task = RouterTask(db.location.dsn(), owner, mac, str(version_dir), config.rules_file(mac),
                      lease, config.window, config.block_severity, config.interval,
                      config.limits)
    try:
        return await pool.run(task)
    except WorkerFailed as error:
        await queue.fail(db, owner, mac, config.interval, str(error))
        raise


async def generate_once(db: Database, config: GenerationConfig, mac: str,
                        start_method: str = "fork") -> RouterGenerated:
    """Generate one router now, outside the queue (the `rulegen` command), in a worker of its
    own, under a lease that outlasts the timeout. GenerationRefused when the router is not
    registered, no ruleset is published, or a server is generating it at this moment;
    WorkerFailed or LeaseLost when the generation itself failed."""
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
                 metrics: Metrics | None = None):
        self._db = db
        self._metrics = metrics or Metrics()
        self._pool = pool
        self._config = config
        self._owner = process_name()
        self._buffer: asyncio.Queue[str] = asyncio.Queue(config.capacity)
        self._wake = asyncio.Event()
        self._dispatcher: asyncio.Task | None = None
        self._tasks = BackgroundTasks()
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
                        self._buffer.put_nowait(mac)
                        claimed += 1
            except DatabaseUnavailable as error:
                log.warning("generation queue: database unavailable (%s)", error)
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
                await queue.renew_claims(self._db, self._owner, CLAIM_LEASE)
            except DatabaseUnavailable as error:
                log.warning("generation queue: claims not renewed (%s)", error)

    async def _work(self) -> None:
        while True:
            raise_if_cancelled()
            mac = await self._buffer.get()
            try:
                await self._generate(mac)
            finally:
                self._buffer.task_done()

    async def _generate(self, mac: str) -> None:
        try:
            result = await generate_router(self._db, self._pool, self._config, self._owner,
                                           mac, CLAIM_LEASE)
        except LeaseLost:  # our lease ran out and another process has the router now
            self._metrics.generations.labels("lease_lost").inc()
            log.info("generation for %s dropped: lease lost to another process", mac)
            return
        except (WorkerFailed, GenerationRefused, DatabaseUnavailable) as error:
            self._metrics.generations.labels("failed").inc()
            log.warning("generation for %s failed: %s", mac, error)
            return
        except Exception:
            self._metrics.generations.labels("failed").inc()
            log.exception("generation for %s failed", mac)
            return
        self.generated += 1
        self._metrics.generations.labels("succeeded").inc()
        self._metrics.generation_seconds.observe(result.seconds)
        log.info("generated %s: %s rules (%s from its alerts), %s firewall entries in %.3fs",
                 mac, result.stats["rules"], result.stats["from_alerts"],
                 result.stats["firewall_entries"], result.seconds)
