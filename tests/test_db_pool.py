"""The connection pool (server/db/pool.py) when the database goes away and comes back."""

from __future__ import annotations

import asyncio
import os
import resource
import time

import psycopg
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


async def test_a_busy_pool_after_an_outage_is_waited_for_not_answered_503(database):
    """A red team restarted the postmaster under uploads: 25 were answered 503 51 s after
    the database was back. Once found unreachable, a request waits only
    UNREACHABLE_WAIT_SECONDS for a connection; a request that waited so long on a pool
    merely busy (every connection serving another upload) marked the database unreachable
    again, so under load the short wait, and its 503s, renewed themselves for as long as the
    load lasted."""
    db = await Database.open(database, 0, 2, 30)
    holder = await psycopg.AsyncConnection.connect(database.dsn(), autocommit=True)
    try:
        # Both connections serve a statement that waits on a lock this test holds until the
        # first requests have had their answers: busy for as long as the test needs, however
        # slow the machine (a 1.5 s sleep ended first under a loaded CI run).
        await holder.execute("SELECT pg_advisory_lock(8301)")
        busy = [asyncio.create_task(db.fetchrow(
            "SELECT %s FROM (SELECT pg_advisory_xact_lock_shared(8301)) held", (n,)))
            for n in range(2)]
        # Both connections serving, their statements waiting on the lock (the pool's own
        # bookkeeping after handing them out is done by then: it found the database again).
        while (await (await holder.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 8301 "
                "AND NOT granted")).fetchone())[0] < 2:
            await asyncio.sleep(0.01)
        db.unreachable = True  # as the pool's failed reconnection left it, a moment before
        first = [db.fetchrow("SELECT %s", (n,)) for n in range(4)]  # wait 1 s, then 503
        assert all(isinstance(answer, DatabaseUnavailable)
                   for answer in await asyncio.gather(*first, return_exceptions=True))
        later = [asyncio.create_task(db.fetchrow("SELECT %s FROM pg_sleep(0.3)", (n,)))
                 for n in range(8)]
        await holder.execute("SELECT pg_advisory_unlock(8301)")
        assert await asyncio.gather(*later, *busy) == [(n,) for n in range(8)] + [(0,), (1,)]
        assert not db.unreachable
    finally:
        await holder.close()
        await db.close()


async def test_connections_the_server_ended_are_never_handed_out(database):
    """Every pooled connection ended by the server (as a restart or a termination ends
    them) is replaced before it is handed out: no statement fails for it."""
    db = await Database.open(database, 4, 4, 30)
    try:
        pids = await asyncio.gather(*[db.fetchrow(
            "SELECT pg_backend_pid() FROM pg_sleep(0.2)") for _ in range(4)])
        assert len({pid for (pid,) in pids}) == 4  # each of the pool's four
        async with await psycopg.AsyncConnection.connect(
                database.dsn(), autocommit=True) as killer:
            await killer.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid",
                                 ([pid for (pid,) in pids],))
            await _ended(killer, [pid for (pid,) in pids])
        answers = await asyncio.gather(*[db.fetchrow("SELECT %s", (n,)) for n in range(16)],
                                       return_exceptions=True)
        assert answers == [(n,) for n in range(16)]
    finally:
        await db.close()


async def _ended(conn, pids: list[int]) -> None:
    """Waits for the terminated backends to be gone from pg_stat_activity."""
    while True:
        cur = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                                 (pids,))
        if (await cur.fetchone())[0] == 0:
            return
        await asyncio.sleep(0.05)
