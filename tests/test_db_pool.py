"""The connection pool (server/db/pool.py) when the database goes away and comes back."""

from __future__ import annotations

import asyncio
import os
import resource
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


async def test_a_connection_opened_past_descriptor_1024_is_handed_out(database):
    """A hostile review: with about 1,000 client connections held open, every database
    connection the process opened after them has a descriptor numbered 1024 or more,
    which the pool's check handed to select(), which refuses it: each was thrown away and
    uploads were answered 503 after DB_TIMEOUT_SECONDS."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open {hard} descriptors at most")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    db = await Database.open(database, 0, 2, 5)
    try:
        assert await db.fetchrow("SELECT 1") == (1,)
        assert await db.fetchrow("SELECT 2") == (2,)  # the same connection, checked again
    finally:
        await db.close()
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
