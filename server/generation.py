"""The generation queue of one server process: claim due routers from the database, buffer them,
generate in the process pool, store the results.

- A dispatcher claims due routers (never-generated first, then by due time) into a buffer of
  RULE_GENERATION_QUEUE_CAPACITY; it polls every RULE_GENERATION_POLL_SECONDS when idle and
  is woken at once when a router registers in this process.
- RULE_GENERATION_MAX_CONCURRENT tasks take routers from the buffer and hand each to a pool
  worker, which renews the lease, reads the telemetry summary, generates, and stores payloads
  and the new due time (server/generation_worker.py). A failure reschedules the router with
  backoff; the queue goes on.
- Nothing is generated while no ruleset is published.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from engine.generate import Limits
from engine.pool import GenerationFailed, GenerationPool
from ruledata.workspace import Workspace
from server.db import generation as queue_db
from server.db.pool import Database, DatabaseUnavailable
from server.generation_worker import RouterGenerated, RouterTask, generate_and_store
from server.metrics import Metrics
from server.settings import Settings

log = logging.getLogger("router_backend.generation")


@dataclass(frozen=True)
class GenerationConfig:
    workers: int
    capacity: int
    interval: timedelta
    timeout: float
    poll_seconds: float
    window: timedelta
    block_severity: int
    limits: Limits
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
            limits=Limits(settings.rule_generation_sample_count,
                          settings.rule_generation_firewall_max_entries),
            rules_filename=settings.rule_generation_rules_filename,
            workspace=Workspace(settings.rule_data_path))

    @property
    def lease(self) -> timedelta:
        """For a one-off generation that nobody renews (rulegen): outlasts the timeout."""
        return timedelta(seconds=self.timeout + 60)


# The server claims a router (waiting in its buffer, or being generated) for CLAIM_LEASE and
# renews all its claims every RENEW_SECONDS while it lives; so the claims of a process that
# died (SIGKILL, power loss) run out within a minute and other processes take those routers
# over.
CLAIM_LEASE = timedelta(seconds=60)
RENEW_SECONDS = 20


class NoRuleset(Exception):
    """No ruleset has been published yet (run rulepreprocess)."""


def owner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def make_pool(workers: int, timeout: float, start_method: str = "spawn") -> GenerationPool:
    """The generation pool as the server uses it: workers do a router's database work too."""
    return GenerationPool(workers, timeout, start_method, function=generate_and_store)


async def generate_router(db: Database, pool: GenerationPool, config: GenerationConfig,
                          me: str, mac: str, lease: timedelta) -> RouterGenerated:
    """One router, start to finish, in a pool worker: renew (or take) the lease for `me`, read
    the telemetry summary, generate, store. Raises NoRuleset, GenerationFailed, LeaseLost or
    DatabaseUnavailable; after a generation failure the router is rescheduled with backoff."""
    version_dir = config.workspace.current_version_dir()
    if version_dir is None:
        await queue_db.release(db, me, mac)
        raise NoRuleset("no ruleset published yet; run rulepreprocess")
    rules_file = config.workspace.idps_rules / config.rules_filename.format(
        mac=mac.replace(":", "-"))
    task = RouterTask(db.location.dsn(), me, mac, str(version_dir), str(rules_file),
                      lease, config.window, config.block_severity, config.interval,
                      config.limits)
    try:
        return await pool.run(task)
    except GenerationFailed as error:
        await queue_db.fail(db, me, mac, config.interval, str(error))
        raise


class GenerationService:
    def __init__(self, db: Database, pool: GenerationPool, config: GenerationConfig,
                 metrics: Metrics | None = None):
        self._db = db
        self._metrics = metrics or Metrics()
        self._pool = pool
        self._config = config
        self._me = owner_name()
        self._buffer: asyncio.Queue[str] = asyncio.Queue(config.capacity)
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.generated = 0

    @property
    def workers(self) -> int:
        return self._config.workers

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._dispatch(), name="generation-dispatch"),
                       asyncio.create_task(self._renew(), name="generation-renew")]
        self._tasks += [asyncio.create_task(self._work(), name=f"generation-worker-{n}")
                        for n in range(self._config.workers)]

    def wake(self) -> None:
        """A router just registered here: look for due routers now."""
        self._wake.set()

    async def stop(self, grace_seconds: float) -> bool:
        """Claim nothing more, hand buffered routers back to the other processes, and let the
        routers being generated finish, for up to `grace_seconds`. Returns False when some
        were still running (their workers should then be killed; their leases expire)."""
        self._tasks[0].cancel()  # the dispatcher
        buffered = []
        while not self._buffer.empty():
            buffered.append(self._buffer.get_nowait())
            self._buffer.task_done()
        for mac in buffered:
            try:
                await queue_db.release(self._db, self._me, mac)
            except DatabaseUnavailable:
                break  # their leases expire by themselves
        try:
            await asyncio.wait_for(self._buffer.join(), grace_seconds)
            finished = True
        except asyncio.TimeoutError:
            log.warning("generations still running after %ss; stopping them", grace_seconds)
            finished = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return finished

    async def _dispatch(self) -> None:
        while True:
            claimed = 0
            free = self._config.capacity - self._buffer.qsize()
            try:
                if free > 0 and self._config.workspace.current_version_dir() is not None:
                    for mac in await queue_db.claim_due(self._db, self._me, free,
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
            await asyncio.sleep(RENEW_SECONDS)
            try:
                await queue_db.renew_claims(self._db, self._me, CLAIM_LEASE)
            except DatabaseUnavailable as error:
                log.warning("generation queue: claims not renewed (%s)", error)

    async def _work(self) -> None:
        while True:
            mac = await self._buffer.get()
            try:
                await self._generate(mac)
            finally:
                self._buffer.task_done()

    async def _generate(self, mac: str) -> None:
        try:
            result = await generate_router(self._db, self._pool, self._config, self._me, mac,
                                           CLAIM_LEASE)
        except queue_db.LeaseLost:  # our lease ran out and another process has the router now
            self._metrics.generations.labels("lease_lost").inc()
            log.info("generation for %s dropped: lease lost to another process", mac)
            return
        except (GenerationFailed, NoRuleset, DatabaseUnavailable) as error:
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
