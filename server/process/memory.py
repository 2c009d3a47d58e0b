"""Freed memory given back to the system. glibc keeps the heap pages a burst freed for the
process's next allocations: a flood of refused 1 MB uploads took a worker from 73 to 285
MiB, and 15 s after it 276 MiB were still held (bench/memory_return.py). `malloc_trim(0)`
returns every free page; Python has no call of its own for it, so ctypes calls glibc's (on
another C library, musl say, there is none and nothing is done)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from typing import AsyncIterator, Callable

RETURN_SECONDS = 30  # a trim with little to return costs 0.1 ms, after a flood about 15 ms


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None


MALLOC_TRIM = _malloc_trim()


def return_freed_memory() -> bool:
    """Give the pages the allocator holds free back to the system; whether any were."""
    return bool(MALLOC_TRIM(0)) if MALLOC_TRIM is not None else False


async def memory_return_context(app) -> AsyncIterator[None]:
    """Every RETURN_SECONDS, on a thread (the trim locks each arena in turn, not the loop),
    what the process freed goes back to the system."""
    async def give_back() -> None:
        while True:
            await asyncio.sleep(RETURN_SECONDS)
            await asyncio.to_thread(return_freed_memory)

    task = asyncio.create_task(give_back(), name="memory-return") if MALLOC_TRIM else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
