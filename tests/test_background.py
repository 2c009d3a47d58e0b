"""Background tasks stop when asked, even when a cancellation is lost on its way (Python
3.11's asyncio.wait_for, around every statement, drops one that arrives as its result does)."""

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


async def test_stop_cancels_again_a_task_still_running_after_its_cancellation(caplog):
    lost = 0

    async def stubborn() -> None:  # loses its first cancellation deep inside, no loop check
        nonlocal lost
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            lost += 1
        await asyncio.sleep(10)

    tasks = BackgroundTasks()
    task = tasks.spawn(stubborn(), "stubborn")
    await asyncio.sleep(0)
    await asyncio.wait_for(tasks.stop(recancel_seconds=0.2), 2)
    assert task.cancelled() and lost == 1
    assert "task stubborn still running 0.2s after it was cancelled" in caplog.text
