"""Rules polls answered 304 from memory, and the cache kept true by PostgreSQL notifications:
a payload written by anyone else is served at once, and a lost listener empties the cache."""

from __future__ import annotations

import asyncio
import time


from engine.payloads import pack
from server.db.connect import connect
from server.db.lifecycle import open_database
from server.generation.rules_sql import store_payloads
from server.typedefs import ETAG_CACHE
from testkit.payloads import store_payload_objects

MAC = "aa:bb:cc:00:00:42"
HEADERS = {"X-ID": MAC}


async def store(settings, version: str) -> None:
    """Write a payload the way any other process would: its own connection."""
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, {"ids": {"version": version, "rules": []},
                                                       "firewall": {"entries": []}})


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def poll(client, etag: str | None = None):
    headers = {**HEADERS, **({"If-None-Match": etag} if etag else {})}
    response = await client.get("/rules/ids", headers=headers)
    return response.status, response.headers.get("ETag")


async def test_unchanged_etag_is_answered_from_memory_until_the_payload_changes(client,
                                                                                settings):
    cache = client.server.app[ETAG_CACHE]
    await until(lambda: cache.listening)
    await store(settings, "1")
    status, first = await poll(client)
    assert status == 200
    assert cache.etag(MAC, "ids") == first.removeprefix('W/"').rstrip('"')
    assert await poll(client, first) == (304, first)

    await store(settings, "2")  # another process's write
    await until(lambda: cache.etag(MAC, "ids") is None)
    status, second = await poll(client, first)
    assert status == 200 and second != first
    assert await poll(client, second) == (304, second)


async def test_a_lost_listener_empties_the_cache_until_it_listens_again(client, settings, sql):
    cache = client.server.app[ETAG_CACHE]
    await until(lambda: cache.listening)
    await store(settings, "1")
    _, first = await poll(client)
    assert cache.etag(MAC, "ids") is not None

    sql.rows("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
             "WHERE datname = current_database() AND query LIKE 'LISTEN%%'")
    await until(lambda: not cache.listening)
    assert cache.etag(MAC, "ids") is None
    await store(settings, "2")  # its notification reaches nobody
    status, second = await poll(client, first)
    assert status == 200 and second != first  # read from the database, not from memory

    await until(lambda: cache.listening)  # it listens again by itself
    assert await poll(client, second) == (304, second)
    assert cache.etag(MAC, "ids") is not None


async def test_only_a_changed_payload_is_written_and_notified(settings, sql, database):
    """The writers send the notification (migration 0021 dropped the trigger): once per
    change, never for content stored again unchanged, which is not even written."""
    listener = connect(database, autocommit=True)
    notes = []
    listener.add_notify_handler(notes.append)
    try:
        with listener.cursor() as cur:
            cur.execute("LISTEN router_rules")
        first = {kind: pack({"version": "1", "kind": kind}) for kind in ("ids", "firewall")}
        second = {**first, "ids": pack({"version": "2", "kind": "ids"})}
        async with open_database(settings) as db:
            assert await store_payloads(db, MAC, first)
            version = sql.value("SELECT xmin::text FROM router_rules WHERE mac = %s", (MAC,))
            assert not await store_payloads(db, MAC, first)
            assert sql.value("SELECT xmin::text FROM router_rules WHERE mac = %s",
                             (MAC,)) == version
            assert await store_payloads(db, MAC, second)
        deadline = time.monotonic() + 5  # delivered after each commit, not at once
        while len(notes) < 2 and time.monotonic() < deadline:
            listener.execute("SELECT 1")  # reads what has arrived
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # time for a third, which must not come
        listener.execute("SELECT 1")
        assert [note.payload for note in notes] == [MAC, MAC]
        assert sql.value("SELECT ids_etag FROM router_rules WHERE mac = %s",
                         (MAC,)) == second["ids"][1]
    finally:
        listener.close()
