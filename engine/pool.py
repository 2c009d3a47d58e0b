"""The generation process pool: RULE_GENERATION_MAX_CONCURRENT worker processes.

Each worker is its own single-process ProcessPoolExecutor, so a generation that outlives
RULE_GENERATION_COMMAND_TIMEOUT_SECONDS can be stopped by killing exactly its process; the
worker is replaced and the other generations go on. Workers are started with `spawn` (the
server has threads) and keep the ruleset loaded between jobs.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from engine.worker import GenerationJob, GenerationResult, generate_for_router, warm_up
from ruledata.lifetime import die_with_parent

log = logging.getLogger("router_backend.engine")


class GenerationFailed(Exception):
    """The generation was stopped (timeout) or its worker died; the message says which."""


class _Worker:
    def __init__(self, start_method: str):
        self._context = multiprocessing.get_context(start_method)
        self.executor = self._new()

    def _new(self) -> ProcessPoolExecutor:
        executor = ProcessPoolExecutor(1, mp_context=self._context, initializer=die_with_parent,
                                       initargs=(os.getpid(),))
        executor.submit(warm_up)
        return executor

    def kill(self) -> None:
        for process in list(getattr(self.executor, "_processes", {}).values()):
            process.kill()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def replace(self) -> None:
        self.kill()
        self.executor = self._new()

    def close(self, wait: bool) -> None:
        if wait:
            self.executor.shutdown(wait=True, cancel_futures=True)
        else:
            self.kill()


class GenerationPool:
    def __init__(self, workers: int, timeout_seconds: float, start_method: str = "spawn",
                 function: Callable[[GenerationJob], object] = generate_for_router):
        self.size = workers
        self._function = function
        self._timeout = timeout_seconds
        self._workers = [_Worker(start_method) for _ in range(workers)]
        self._free: asyncio.Queue[_Worker] = asyncio.Queue()
        for worker in self._workers:
            self._free.put_nowait(worker)

    async def run(self, job: GenerationJob) -> GenerationResult:
        """Generate for one router in a free worker; GenerationFailed on timeout or crash."""
        worker = await self._free.get()
        try:
            future = asyncio.get_running_loop().run_in_executor(
                worker.executor, self._function, job)
            try:
                return await asyncio.wait_for(future, self._timeout)
            except asyncio.TimeoutError:
                log.error("generation for %s exceeded %ss; worker replaced", job.mac,
                          self._timeout)
                worker.replace()
                raise GenerationFailed(f"timed out after {self._timeout}s") from None
            except BrokenProcessPool:
                log.error("generation worker died while generating for %s; replaced", job.mac)
                worker.replace()
                raise GenerationFailed("worker process died") from None
        finally:
            self._free.put_nowait(worker)

    def close(self, wait: bool = True) -> None:
        """Stop the workers: after their current job (`wait`), or at once, killing them."""
        for worker in self._workers:
            worker.close(wait)
