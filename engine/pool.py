"""A pool of worker processes that runs one function, each call with a wall-clock limit:
pebble's ProcessPool, which stops a call that outlives the limit by ending its worker and
starting another, while the other calls go on. Workers keep their module state between calls
(a loaded ruleset, a database connection) and die with the process that started them
(engine.processes).

    pool = WorkerPool(generate_and_store, workers=2, timeout_seconds=300)
    result = await pool.run(task)          # WorkerFailed on timeout or a dead worker
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import TimeoutError as CallTimedOut
from typing import Callable, Generic, TypeVar

from pebble import ProcessExpired, ProcessPool

from engine.processes import die_with_parent

Task = TypeVar("Task")
Result = TypeVar("Result")


class WorkerFailed(Exception):
    """The call was stopped (timeout) or its worker died; the message says which."""


class WorkerPool(Generic[Task, Result]):
    """`workers` processes running `function` (a picklable module-level function)."""

    def __init__(self, function: Callable[[Task], Result], workers: int,
                 timeout_seconds: float, start_method: str = "spawn"):
        self._function = function
        self._timeout = timeout_seconds
        self._pool = ProcessPool(workers, initializer=die_with_parent,
                                 initargs=(os.getpid(),),
                                 context=multiprocessing.get_context(start_method))

    async def run(self, task: Task) -> Result:
        """`function(task)` in a free worker; WorkerFailed on timeout or crash (the worker is
        replaced)."""
        future = self._pool.schedule(self._function, args=(task,), timeout=self._timeout)
        try:
            return await asyncio.wrap_future(future)
        except CallTimedOut:
            raise WorkerFailed(f"timed out after {self._timeout}s; worker replaced") from None
        except ProcessExpired as error:
            raise WorkerFailed(f"worker process died ({error}); replaced") from None

    def close(self, wait: bool = True) -> None:
        """Stop the workers: after their current call (`wait`), or at once, killing them."""
        if wait:
            self._pool.close()
        else:
            self._pool.stop()
        self._pool.join()
