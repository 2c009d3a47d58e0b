"""The connection pool (server/db/pool.py) when the database goes away and comes back."""

from __future__ import annotations

import asyncio
import time

import pytest

from server.db.pool import RECONNECT_SECONDS, Database, DatabaseUnavailable
from testkit.tcp_proxy import TcpProxy


async def test_a_request_waiting_when_the_pool_gave_up_is_served_once_the_database_is_back(
        database):
    """The pool gives up a connection attempt after RECONNECT_SECONDS and tries again only
    when another request comes: a request already waiting, with no other coming (every
    router of a process waiting), waited its whole DB_TIMEOUT_SECONDS (30) although the
    database was back (a CI run of the postmaster drill)."""
    proxy = await TcpProxy(database.host, database.port).start()
    db = await Database.open(proxy.location(database), 0, 2, 30)
    try:
        proxy.go_down()
        started = time.monotonic()
        waiting = asyncio.create_task(db.fetchrow("SELECT 1"))
        await asyncio.sleep(RECONNECT_SECONDS * 3)  # attempts given up at least once
        assert not waiting.done() and db.unreachable
        with pytest.raises(DatabaseUnavailable):  # a later request waits briefly
            await db.fetchrow("SELECT 2")
        proxy.come_back()
        assert await asyncio.wait_for(waiting, 10) == (1,)
        assert time.monotonic() - started < 10
        assert await db.fetchrow("SELECT 3") == (3,) and not db.unreachable
    finally:
        await db.close()
        await proxy.close()
