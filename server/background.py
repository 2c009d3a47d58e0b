"""What the background work of a server process shares: the name it takes leases and job
ticks under, and one way to start and stop its long-running tasks."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Coroutine

log = logging.getLogger("router_backend.background")

RECANCEL_SECONDS = 5


def process_name() -> str:
    """The owner of this process's generation leases and job-tick claims in the database
    (asked at run time, so a forked child does not inherit its parent's name)."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def pause(seconds: float) -> None:
    """`asyncio.sleep` for the loops of background tasks, which also ends a task whose
    cancellation was lost. On Python 3.11, `asyncio.wait_for` (which aiopg awaits every
    statement with) returns the result of a statement that completes as the task is cancelled
    and drops the cancellation; a loop around such a statement would then go on forever and
    its stop() with it (seen as a test run that hung in teardown)."""
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
