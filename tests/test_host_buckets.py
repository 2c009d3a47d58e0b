"""The flood limits shared by a host's HTTP workers (server/web/host_buckets.py): a router
that spreads its requests over the workers gets its limit once, not once a worker."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from server.web import host_buckets
from server.web.host_buckets import HostBuckets, make_table_file, map_table_file
from testkit.server import ServerRunner, http_get

MAC = "02:00:00:00:77:01"
OTHER = "02:00:00:00:77:02"


def _buckets(path: Path, per_minute: int, table: int = 0, tables: int = 2) -> HostBuckets:
    return HostBuckets(per_minute, map_table_file(path, tables), table)


def test_two_mappings_of_the_file_are_one_bucket(tmp_path):
    path = tmp_path / "tables"
    make_table_file(path, 2)
    first, second = _buckets(path, 60), _buckets(path, 60)
    now = time.monotonic()
    assert first.take(MAC, 40, now) == 0.0
    assert second.available(MAC, now) == pytest.approx(20)
    assert second.take(MAC, 30, now) == pytest.approx(10.0)  # 10 short at 1 a second
    assert first.take(MAC, 20, now) == 0.0
    assert second.take(MAC, 1, now + 1) == 0.0  # refilled: one a second
    first.give_back(MAC, 5, now + 1)
    assert second.available(MAC, now + 1) == pytest.approx(5)
    other_table = _buckets(path, 60, table=1)
    assert other_table.available(MAC, now) == 60  # each limit its own table
    assert second.available(OTHER, now) == 60
    with pytest.raises(ValueError):
        map_table_file(path, 3)  # a file of another layout is refused, not misread


def test_more_keys_than_a_place_holds_are_each_limited(tmp_path, monkeypatch):
    """A table of 8 slots, 3 probed: 40 keys each spend part of their bucket. A key keeps
    its bucket while it has room; when every slot probed holds a bucket still refilling,
    the fullest is taken over (its key starts again full); a bucket refilled to the brim
    frees its slot. No key ever gets more than its limit from a bucket it still holds."""
    monkeypatch.setattr(host_buckets, "SLOTS", 8)
    monkeypatch.setattr(host_buckets, "PROBES", 3)
    path = tmp_path / "tables"
    make_table_file(path, 1)
    buckets = _buckets(path, 60, tables=1)
    now = time.monotonic()
    keys = [f"02:00:00:00:78:{n:02x}" for n in range(40)]
    for key in keys:
        assert buckets.take(key, 10, now) == 0.0
    held = [key for key in keys if buckets.available(key, now) == 50]
    assert 0 < len(held) <= 8  # the last ones written, in the 8 slots
    for key in held:
        assert buckets.take(key, 50, now) == 0.0 and buckets.take(key, 1, now) > 0
    later = now + 61  # every bucket refilled: every slot free again
    assert all(buckets.take(key, 60, later) == 0.0 for key in keys[:8])


def _take_in_turn(path: str, per_minute: int, tries: int, taken) -> None:
    buckets = HostBuckets(per_minute, map_table_file(Path(path), 1), 0)
    for _ in range(tries):
        if buckets.take(MAC, 1, time.monotonic()) == 0.0:
            with taken.get_lock():
                taken.value += 1
        time.sleep(0.0005)


def test_processes_taking_from_one_bucket_share_its_limit(tmp_path):
    """Two processes each try 100 requests of one router, limit 100 a minute: about 100
    are let through in all, where each process's own buckets let 200 through."""
    path = tmp_path / "tables"
    make_table_file(path, 1)
    spawn = multiprocessing.get_context("spawn")
    taken = spawn.Value("i", 0)
    workers = [spawn.Process(target=_take_in_turn, args=(str(path), 100, 100, taken))
               for _ in range(2)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    refilled = (time.monotonic() - started) * 100 / 60
    assert 100 <= taken.value <= 100 + refilled + 2, (taken.value, refilled)


def _take_at_full_speed(path: str, per_minute: int, tries: int, start, taken) -> None:
    buckets = HostBuckets(per_minute, map_table_file(Path(path), 1), 0)
    start.wait(60)
    mine = sum(buckets.take(MAC, 1, time.monotonic()) == 0.0 for _ in range(tries))
    with taken.get_lock():
        taken.value += mine


def test_processes_taking_at_full_speed_from_one_bucket_lose_no_take(tmp_path):
    """Found by attacking it: two processes taking from one bucket in a tight loop each
    read it while the other wrote it, so a router whose requests land on two workers at the
    same moment got past its limit. Each take now holds a record lock on the key's slots:
    1,000 a minute, two processes trying 3,000 each at once, and 1,000 are let through (and
    what refilled meanwhile); without the lock all 6,000 were."""
    path = tmp_path / "tables"
    make_table_file(path, 1)
    spawn = multiprocessing.get_context("spawn")
    start, taken = spawn.Barrier(3), spawn.Value("i", 0)
    workers = [spawn.Process(target=_take_at_full_speed,
                             args=(str(path), 1000, 3000, start, taken)) for _ in range(2)]
    for worker in workers:
        worker.start()
    start.wait(60)
    began = time.monotonic()
    for worker in workers:
        worker.join(60)
    refilled = (time.monotonic() - began) * 1000 / 60
    assert all(worker.exitcode == 0 for worker in workers)
    assert 1000 <= taken.value <= 1000 + refilled + 1, (taken.value, refilled)


def test_a_router_spreading_requests_over_two_workers_gets_its_limit_once(database,
                                                                          tmp_path):
    """HTTP_WORKERS=2, 20 requests a minute: 60 polls of one router, each on a connection
    of its own (the kernel spreads them over both workers), get 20 answers and the rest
    429 (each worker counting its own let up to 40 through)."""
    server = ServerRunner(database, tmp_path, flood_limits=True, HTTP_WORKERS="2",
                          ROUTER_REQUESTS_PER_MINUTE="20", RULE_GENERATION_ENABLED="false",
                          TOO_MANY_REQUESTS_DELAY_SECONDS="0")  # 40 refusals one by one
    server.start(timeout=120)
    try:
        statuses = [http_get(f"{server.url}/rules/last_updated", **{
            "X-ID": MAC, "Connection": "close"})[0] for _ in range(60)]
    finally:
        server.stop()
    assert set(statuses) == {200, 429} and 20 <= statuses.count(200) <= 21, statuses
    assert (tmp_path / "flood-limits").exists()


def test_requests_sent_at_once_over_two_workers_get_no_more_than_the_allowance(database, tmp_path):
    """HTTP_WORKERS=2, key mode: 100 polls of an enrolled router sent at once, each on a
    connection of its own (the kernel spreads them over both workers), get at most 20
    answers (its 20 a minute, and what refills in the burst's seconds), the rest 429; 100
    wrong keys sent at once from one address have 10 checked (401), the rest 429. Until a
    worker trusts the router's key, each of its polls is checked like a guess (a place in
    the address's 10 taken first, given back when right), so how many of the burst reach
    the router's allowance depends on when the first checks end: at least those 10."""
    server = ServerRunner(database, tmp_path, flood_limits=True, HTTP_WORKERS="2",
                          ROUTER_AUTH="key", ENROLLMENT_TOKEN="fleet-token-0123456789",
                          ROUTER_REQUESTS_PER_MINUTE="20",
                          FAILED_CREDENTIALS_PER_MINUTE_PER_ADDRESS="10",
                          RULE_GENERATION_ENABLED="false")
    server.start(timeout=120)
    try:
        (polls, poll_seconds), (guesses, guess_seconds) = asyncio.run(_at_once(server.url))
    finally:
        server.stop()
    # What refilled while the burst lasted: 20 a minute, 10 a minute.
    assert 10 <= polls[200] <= 20 + poll_seconds / 3 and polls[429] == 100 - polls[200], polls
    assert 10 <= guesses[401] <= 10 + guess_seconds / 6 and \
        guesses[429] == 100 - guesses[401], guesses


async def _at_once(url: str) -> tuple[tuple[Counter, float], tuple[Counter, float]]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(
            limit=0, force_close=True)) as session:
        key, _ = [await _enrolled(session, url, mac) for mac in (MAC, OTHER)]

        async def status(mac: str, credential: str) -> int:
            async with session.get(f"{url}/rules/last_updated", headers={
                    "X-ID": mac, "Authorization": f"Bearer {credential}"}) as answer:
                return answer.status

        async def burst(mac: str, credentials: list[str]) -> tuple[Counter, float]:
            began = time.monotonic()
            statuses = await asyncio.gather(*(status(mac, c) for c in credentials))
            return Counter(statuses), time.monotonic() - began
        return (await burst(MAC, [key] * 100),
                await burst(OTHER, [f"guess-{n}" for n in range(100)]))


async def _enrolled(session: aiohttp.ClientSession, url: str, mac: str) -> str:
    async with session.post(f"{url}/enroll", headers={
            "X-ID": mac, "Authorization": "Bearer fleet-token-0123456789"}) as enrolled:
        assert enrolled.status == 201, await enrolled.text()
        return (await enrolled.json())["key"]
