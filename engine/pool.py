"""A pool of worker processes that runs one function, each call with a wall-clock limit.

Each worker is its own single-process ProcessPoolExecutor whose first call reports the
process id, so a call that outlives the time limit can be stopped by killing exactly its
process (no private attribute of the executor is used); the worker is replaced and the other
calls go on. Workers keep their module state between calls (a loaded ruleset, a database
connection) and die with the process that started them (engine.processes).

    pool = WorkerPool(generate_and_store, workers=2, timeout_seconds=300)
    result = await pool.run(task)          # WorkerFailed on timeout or a dead worker
"""

from __future__ import annotations

import asyncio
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Generic, TypeVar

from engine.processes import process_pool

Task = TypeVar("Task")
Result = TypeVar("Result")


class WorkerFailed(Exception):
    """The call was stopped (timeout) or its worker died; the message says which."""


def warm_up() -> int:
    """Submitted first to a new worker, so that its imports happen before real work and the
    pool learns which process to kill."""
    return os.getpid()


class _Worker:
    def __init__(self, start_method: str):
        self._start_method = start_method
        self.executor = self._new()

    def _new(self) -> ProcessPoolExecutor:
        executor = process_pool(1, self._start_method)
        self._pid = executor.submit(warm_up)
        return executor

    def kill(self) -> None:
        """Kill the process at once. It is our child and is not reaped before the executor
        sees it die, so its id cannot have been reused yet."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.executor.shutdown(wait=False, cancel_futures=True)

    @property
    def pid(self) -> int | None:
        """The worker's process id; None until it has started (or when it died starting)."""
        try:
            return self._pid.result(timeout=0)
        except Exception:
            return None

    def replace(self) -> None:
        self.kill()
        self.executor = self._new()

    def close(self, wait: bool) -> None:
        if wait:
            self.executor.shutdown(wait=True, cancel_futures=True)
        else:
            self.kill()


class WorkerPool(Generic[Task, Result]):
    """`workers` processes running `function` (a picklable module-level function)."""

    def __init__(self, function: Callable[[Task], Result], workers: int,
                 timeout_seconds: float, start_method: str = "spawn"):
        self._function = function
        self._timeout = timeout_seconds
        self._workers = [_Worker(start_method) for _ in range(workers)]
        self._free: asyncio.Queue[_Worker] = asyncio.Queue()
        for worker in self._workers:
            self._free.put_nowait(worker)

    @property
    def pids(self) -> list[int | None]:
        return [worker.pid for worker in self._workers]

    async def run(self, task: Task) -> Result:
        """`function(task)` in a free worker; WorkerFailed on timeout or crash (the worker is
        replaced)."""
        worker = await self._free.get()
        try:
            future = asyncio.get_running_loop().run_in_executor(
                worker.executor, self._function, task)
            try:
                return await asyncio.wait_for(future, self._timeout)
            except asyncio.TimeoutError:
                worker.replace()
                raise WorkerFailed(f"timed out after {self._timeout}s; worker replaced") from None
            except BrokenProcessPool:
                worker.replace()
                raise WorkerFailed("worker process died; replaced") from None
        finally:
            self._free.put_nowait(worker)

    def close(self, wait: bool = True) -> None:
        """Stop the workers: after their current call (`wait`), or at once, killing them."""
        for worker in self._workers:
            worker.close(wait)
