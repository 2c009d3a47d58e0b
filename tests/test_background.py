"""Background tasks stop when asked, even when a cancellation is lost on its way (Python
3.11's asyncio.wait_for, inside aiopg, drops one that arrives as its result does)."""

from __future__ import annotations

import asyncio

from server.background import BackgroundTasks, pause


async def test_a_loop_whose_cancellation_was_lost_still_stops():
    inside, turns, lost = asyncio.Event(), 0, 0

    async def loop() -> None:
        nonlocal turns, lost
        while True:
            await pause(0.01)
            turns += 1
            try:  # stands for a statement whose result raced the cancellation
                inside.set()
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1  # lost once: the statement "returned"

    tasks = BackgroundTasks()
    task = tasks.spawn(loop(), "loop")
    await inside.wait()
    await asyncio.wait_for(tasks.stop(), 2)
    assert task.cancelled() and (turns, lost) == (1, 1)
