"""What the background work of a server process shares: the name it takes leases and job
ticks under, and one way to start and stop its long-running tasks."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Coroutine


def process_name() -> str:
    """The owner of this process's generation leases and job-tick claims in the database
    (asked at run time, so a forked child does not inherit its parent's name)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class BackgroundTasks:
    """Tasks that live until stopped; stopping cancels them and waits until they are gone."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coroutine: Coroutine, name: str) -> asyncio.Task:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
