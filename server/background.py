"""What the background work of a server process shares: the name it takes leases and job
ticks under, one way to start and stop its long-running tasks, one way for each loop to
report its health (LoopHealth), and one way to keep the outcomes of leased work that the
database could not take when they happened (UnrecordedOutcomes)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Awaitable, Callable, Coroutine, Generic, Hashable, TypeVar

from prometheus_client import Gauge

log = logging.getLogger("router_backend.background")

RECANCEL_SECONDS = 5


def process_name() -> str:
    """The owner of this process's generation leases and job-tick claims in the database
    (asked at run time, so a forked child does not inherit its parent's name)."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def pause(seconds: float) -> None:
    """`asyncio.sleep` for the loops of background tasks, which also ends a task whose
    cancellation was lost. On Python 3.11, `asyncio.wait_for` (which server/db/pool.py awaits
    every statement with) returns the result of a statement that completes as the task is
    cancelled and drops the cancellation; a loop around such a statement would then go on
    forever and its stop() with it (seen as a test run that hung in teardown)."""
    raise_if_cancelled()
    await asyncio.sleep(seconds)


def raise_if_cancelled() -> None:
    """End this task if it was asked to (see `pause`), at the top of a loop's turn."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class BackgroundTasks:
    """Tasks that live until stopped; stopping cancels them and waits until they are gone."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coroutine: Coroutine, name: str) -> asyncio.Task:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def stop(self, recancel_seconds: float = RECANCEL_SECONDS) -> None:
        """Cancel the tasks and wait until they are gone. One still running `recancel_seconds`
        later is cancelled again (and named in the log): its cancellation may have been lost
        (see `pause`), and a stop must not wait forever."""
        pending = set(self._tasks)
        while pending:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=recancel_seconds)
            for task in pending:
                log.warning("task %s still running %ss after it was cancelled; cancelling it "
                            "again", task.get_name(), recancel_seconds)


FLAP_SECONDS = 60.0  # a failure this soon after a recovery continues the same outage


class LoopHealth:
    """What one long-running loop reports: when it last did its work (a gauge the caller
    passes, `background_loop_last_success_timestamp_seconds{loop=...}`: the alert rules watch
    it), one warning when it starts failing and one line when it works again. A database
    outage fails every attempt of every loop; a line per attempt would bury the log. A loop
    that fails again within FLAP_SECONDS of working again (connections terminated over and
    over, a server restarting) is in the same outage and logs nothing more.

    The gauge starts at the loop's creation, so a loop that never once works is also seen
    as stopped."""

    def __init__(self, name: str, logger: logging.Logger, last_success: Gauge):
        self.name = name
        self._log = logger
        self._last_success = last_success
        self._failing_since: float | None = None
        self._recovered_at = float("-inf")
        self._quiet = False  # failing again soon after a recovery: nothing more logged
        self.failures = 0   # attempts failed in the outage under way
        self.outages = 0    # outages logged since start
        last_success.set(time.time())

    @property
    def failing(self) -> bool:
        return self._failing_since is not None

    def succeeded(self) -> None:
        self._last_success.set(time.time())
        if self._failing_since is None:
            return
        if not self._quiet:
            self._log.warning("%s: working again after %.1fs (%d attempts failed)", self.name,
                              time.monotonic() - self._failing_since, self.failures)
        self._failing_since = None
        self._recovered_at = time.monotonic()
        self.failures = 0

    def failed(self, error: BaseException | str) -> None:
        self.failures += 1
        if self._failing_since is not None:
            return
        self._failing_since = time.monotonic()
        self._quiet = self._failing_since - self._recovered_at < FLAP_SECONDS
        if self._quiet:
            return
        self.outages += 1
        lines = str(error).strip().splitlines()  # the driver's messages run over lines
        self._log.warning("%s: %s; retrying quietly until it works again", self.name,
                          " ".join(line.strip() for line in lines) or type(error).__name__)


Key = TypeVar("Key", bound=Hashable)
Outcome = TypeVar("Outcome")


class UnrecordedOutcomes(Generic[Key, Outcome]):
    """Outcomes of leased work whose recording failed (the database away), kept in this
    process and recorded by the owner's loop before it claims anything more, each once: a
    notification that was sent is never sent again, a router whose generation failed is
    rescheduled instead of waiting out its lease. `record` stores one outcome."""

    def __init__(self, record: Callable[[Key, Outcome], Awaitable[None]]) -> None:
        self._record = record
        self._kept: dict[Key, Outcome] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self._kept

    def keep(self, key: Key, outcome: Outcome) -> None:
        self._kept[key] = outcome

    def forget(self, key: Key) -> None:
        """The work was claimed again: a new outcome will come."""
        self._kept.pop(key, None)

    async def record(self) -> None:
        """Record what is kept, in order; what fails to record stays kept (and the error is
        raised)."""
        for key, outcome in list(self._kept.items()):
            await self._record(key, outcome)
            self._kept.pop(key, None)
