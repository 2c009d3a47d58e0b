"""Waiting in tests for something the service does in its own time."""

from __future__ import annotations

import asyncio
import time


async def wait_for(check, timeout: float = 30.0, interval: float = 0.2):
    """Await `check()` every `interval` seconds until it returns something true, and return
    that; AssertionError when `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := await check():
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not reached in {timeout}s")


async def generated_after(sql, moment, macs: list[str], timeout: float = 60) -> None:
    """Wait until every router of `macs` was generated after `moment` (a time, or
    '-infinity'); AssertionError when `timeout` seconds pass first."""
    async def done() -> bool:
        return sql.value("SELECT count(*) FROM generation_queue WHERE mac = ANY(%s::macaddr[]) "
                         "AND generated_at > %s", (macs, moment)) == len(macs)

    await wait_for(done, timeout)
