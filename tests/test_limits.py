"""Flood limits (issue 12): per-router requests and records, per-address registrations.
Past a limit: 429 with Retry-After and the JSON error, nothing of that request stored, and
other routers unaffected."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
import time
from contextlib import asynccontextmanager, contextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from server.db.connect import connect
from server.routers.sql import REGISTRATION_LOCK_CLASS
from server.settings import SETTINGS
from server.web import limits, middleware
from server.routers.registration import MAX_WAITING_PER_ADDRESS
from testkit.database import command_env, settings_for
from testkit.telemetry import stored_count
from tests.commands import router_backend

FLOODER, OTHER = "aa:bb:cc:00:1f:01", "aa:bb:cc:00:1f:02"
RECORD = b'{"event_type": "alert", "alert": {"signature_id": 1, "severity": 3}}\n'


async def poll(client, mac: str, **headers: str) -> int:
    response = await client.get("/rules/last_updated", headers={"X-ID": mac, **headers})
    if response.status == 429:
        assert int(response.headers["Retry-After"]) >= 1
        assert "limit" in (await response.json())["error"]
    return response.status


async def upload(client, mac: str, records: int) -> int:
    response = await client.post("/log/events", data=RECORD * records,
                                 headers={"X-ID": mac, "Content-Type": "application/x-ndjson"})
    return response.status


async def test_requests_per_router(make_client, database, tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path, ROUTER_REQUESTS_PER_MINUTE="5"))
    assert [await poll(client, FLOODER) for _ in range(7)] == [200] * 5 + [429] * 2
    assert await poll(client, OTHER) == 200
    assert await upload(client, FLOODER, 1) == 429
    assert sql.value("SELECT count(*) FROM activations WHERE mac = %s", (FLOODER,)) == 5
    assert stored_count(sql) == 0
    assert (await client.get("/health", headers={"X-ID": FLOODER})).status == 200
    metrics = await (await client.get("/metrics")).text()
    assert 'router_requests_limited_total{limit="requests"} 3.0' in metrics


async def test_records_per_router(make_client, database, tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path, ROUTER_RECORDS_PER_MINUTE="100",
                                            INGEST_BATCH_ROWS="10"))
    assert await upload(client, FLOODER, 80) == 200
    # Over the limit part way through: refused whole, batches already written rolled back.
    assert await upload(client, FLOODER, 30) == 429
    assert await upload(client, OTHER, 100) == 200
    assert stored_count(sql, mac=FLOODER) == 80
    assert stored_count(sql, mac=OTHER) == 100


async def test_new_registrations_per_client_address(make_client, database, tmp_path, sql):
    settings = settings_for(database, tmp_path, REGISTRATIONS_PER_MINUTE_PER_ADDRESS="3")
    assert router_backend(command_env(settings), "subscriptions", "add", OTHER).returncode == 0
    client = await make_client(settings)
    here = {"X-Forwarded-For": "203.0.113.9"}  # through the proxy (loopback is trusted)
    macs = [f"aa:bb:cc:00:1e:{n:02x}" for n in range(5)]
    assert [await poll(client, mac, **here) for mac in macs] == [200, 200, 200, 429, 429]
    assert sql.value("SELECT count(*) FROM routers") == 4  # OTHER and three new ones
    assert await poll(client, OTHER, **here) == 200        # registered already: not limited
    assert await poll(client, macs[3], **{"X-Forwarded-For": "198.51.100.4"}) == 200
    # A client cannot pick its own address: what the trusted proxy appended counts.
    spoofed = {"X-Forwarded-For": "192.0.2.1, 203.0.113.9"}
    assert await poll(client, macs[4], **spoofed) == 429


async def test_forwarded_address_ignored_without_trusted_proxies(make_client, database,
                                                                 tmp_path, sql):
    """Issue 44: the default trusts no proxy, loopback included (a local client rotated its
    apparent address past every per-address limit)."""
    default = next(s.default for s in SETTINGS if s.name == "TRUSTED_PROXIES")
    assert default == ""
    client = await make_client(settings_for(database, tmp_path, TRUSTED_PROXIES=default,
                                            REGISTRATIONS_PER_MINUTE_PER_ADDRESS="2"))
    statuses = [await poll(client, f"aa:bb:cc:00:1d:{n:02x}",
                           **{"X-Forwarded-For": f"198.51.100.{n}"}) for n in range(3)]
    assert statuses == [200, 200, 429]  # all from 127.0.0.1, whatever the header says


async def test_nobody_spends_another_routers_budget_in_key_mode(make_client, database,
                                                                tmp_path):
    settings = settings_for(database, tmp_path, ROUTER_AUTH="key", ROUTER_REQUESTS_PER_MINUTE="3")
    added = router_backend(command_env(settings), "subscriptions", "add", FLOODER)
    key = added.stdout.strip().splitlines()[-1]
    client = await make_client(settings)
    for _ in range(10):
        assert await poll(client, FLOODER, Authorization="Bearer wrong") == 401
    assert [await poll(client, FLOODER, Authorization=f"Bearer {key}")
            for _ in range(4)] == [200, 200, 200, 429]


def new_macs(count: int, prefix: str = "02:27") -> list[str]:
    return [f"{prefix}:00:00:{n // 256:02x}:{n % 256:02x}" for n in range(count)]


async def test_concurrent_new_routers_cannot_beat_the_registration_limit(make_client,
                                                                         database, tmp_path,
                                                                         sql):
    """Issue 27, finding 1: the limit was checked before the insert and counted after, so
    300 new MACs sent at once from one address all registered (limit 30). Now counted in the
    database: two server processes together register 30."""
    settings = settings_for(database, tmp_path, REGISTRATIONS_PER_MINUTE_PER_ADDRESS="30")
    processes = [await make_client(settings), await make_client(settings)]  # two servers
    here = {"X-Forwarded-For": "203.0.113.27"}
    statuses = await asyncio.gather(*(poll(processes[n % 2], mac, **here)
                                      for n, mac in enumerate(new_macs(300))))
    assert statuses.count(200) == 30 and statuses.count(429) == 270
    assert sql.value("SELECT count(*) FROM routers") == 30
    assert sql.value("SELECT DISTINCT registered_from FROM routers") == "203.0.113.27"
    # Known routers from the same address are never refused.
    known = [mac for mac, status in zip(new_macs(300), statuses) if status == 200]
    restarted = await make_client(settings_for(database, tmp_path,
                                               REGISTRATIONS_PER_MINUTE_PER_ADDRESS="30"))
    again = await asyncio.gather(*(poll(restarted, mac, **here) for mac in known))
    assert again == [200] * 30


@contextmanager
def bucket_held(database, bucket: str):
    """The database's registration lock of an address bucket, held by the test: a registration
    from that address that reaches the database waits on it."""
    conn = connect(database, autocommit=True)
    try:
        conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (REGISTRATION_LOCK_CLASS, bucket))
        yield
    finally:
        conn.close()


@asynccontextmanager
async def routers_locked(database):
    """`routers` locked by the test: every read of it waits. Taken in a thread, as a job of
    the in-process server may be reading it and must get to commit."""
    conn = connect(database)
    try:
        await asyncio.to_thread(conn.execute, "LOCK TABLE routers IN ACCESS EXCLUSIVE MODE")
        yield
    finally:
        conn.close()


def registrations_waiting(sql) -> int:
    return sql.value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                     "AND classid = %s AND database = (SELECT oid FROM pg_database "
                     "WHERE datname = current_database())", (REGISTRATION_LOCK_CLASS,))


async def test_a_burst_from_one_address_reaches_the_database_one_at_a_time(make_client,
                                                                           database, tmp_path,
                                                                           sql):
    """The CI's Citus pass: 300 new MACs at once from one address each took a database
    connection to wait on the address's lock, and some waited past the pool's timeout (503).
    Now they wait in the process, one at a time asks the database, and a new router from
    another address is registered meanwhile. Past 32 waiting, the rest are refused at once
    (found by attacking it: requests sent and abandoned at once queued without bound)."""
    client = await make_client(settings_for(database, tmp_path,
                                            REGISTRATIONS_PER_MINUTE_PER_ADDRESS="5"))
    flood = {"X-Forwarded-For": "203.0.113.28"}
    with bucket_held(database, "203.0.113.28"):
        burst = [asyncio.create_task(poll(client, mac, **flood)) for mac in new_macs(40, "02:28")]
        assert await settled(lambda: registrations_waiting(sql)) == 1
        other = {"X-Forwarded-For": "198.51.100.28"}
        assert await asyncio.wait_for(poll(client, "02:28:01:00:00:01", **other), 5) == 200
        refused_at_once = [task.result() for task in burst if task.done()]
        assert refused_at_once == [429] * (40 - MAX_WAITING_PER_ADDRESS)
    statuses = await asyncio.gather(*burst)
    assert statuses.count(200) == 5 and statuses.count(429) == 35


async def test_a_full_address_is_refused_without_a_registration(make_client, database,
                                                                tmp_path, sql):
    """Once the database refused an address, its new routers are refused by the process
    until the address may register again: with the address's database lock held by the
    test, they are still answered at once. Whether each is registered is still read (a
    registered router is never refused), one read at a time: with `routers` locked by the
    test, 30 at once leave one read waiting (20 before, as many as the pool had)."""
    client = await make_client(settings_for(database, tmp_path,
                                            REGISTRATIONS_PER_MINUTE_PER_ADDRESS="2"))
    flood = {"X-Forwarded-For": "203.0.113.29"}
    assert [await poll(client, mac, **flood) for mac in new_macs(3, "02:29")] == [200, 200, 429]
    with bucket_held(database, "203.0.113.29"):
        statuses = await asyncio.wait_for(asyncio.gather(
            *(poll(client, mac, **flood) for mac in new_macs(50, "02:2a"))), 3)
        assert statuses == [429] * 50
        assert registrations_waiting(sql) == 0
    async with routers_locked(database):
        burst = [asyncio.create_task(poll(client, mac, **flood)) for mac in new_macs(30, "02:2e")]
        assert await settled(lambda: statements_active(sql, "SELECT 1 FROM routers WHERE mac")) == 1
    assert await asyncio.gather(*burst) == [429] * 30
    assert sql.value("SELECT count(*) FROM routers WHERE registered_from = '203.0.113.29'") == 2


async def test_refusals_from_memory_never_prolong_it(make_client, database, tmp_path, sql):
    """Found by attacking it: a new MAC whose turn began while its address was known full,
    and whose read ended after that, set the address full again (a second more, and so on
    under a flood: refused for 20 s while the database had room). The test ages the address's
    registrations to leave the minute in 2 s and holds `routers` locked across that."""
    client = await make_client(settings_for(database, tmp_path,
                                            REGISTRATIONS_PER_MINUTE_PER_ADDRESS="2"))
    here = {"X-Forwarded-For": "203.0.113.31"}
    macs = new_macs(5, "02:31")
    assert [await poll(client, mac, **here) for mac in macs[:2]] == [200, 200]
    sql.rows("UPDATE routers SET registered_at = now() - interval '58.5 seconds' "
             "WHERE registered_from = '203.0.113.31'")
    assert await poll(client, macs[2], **here) == 429  # known full for 2 s from now
    async with routers_locked(database):
        late = asyncio.create_task(poll(client, macs[3], **here))
        assert await settled(lambda: statements_active(sql, "SELECT 1 FROM routers WHERE mac")) == 1
        await asyncio.sleep(2.5)
    assert await late == 429  # its turn began while the address was full
    assert await poll(client, macs[4], **here) == 200


def statements_active(sql, beginning: str) -> int:
    """This database's statements now running (or waiting) whose text begins so."""
    return sql.value("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND state = 'active' AND starts_with(ltrim(query, E' \n'), %s)", (beginning,))


async def settled(count) -> int:
    """`count()` once it is above 0 and the rest had time to be counted too."""
    deadline = time.monotonic() + 10
    while count() == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    return count()


@pytest.mark.parametrize("first_call", ["poll", "enroll"])
async def test_a_router_another_address_is_registering_is_let_in(first_call, make_client,
                                                                database, tmp_path, sql):
    """Found by attacking it: the same new MAC from two addresses at once. The one that
    waited for the other's insert did nothing and did not see the row (not in its
    statement's snapshot), and was told its address was full (429, and by a first poll the
    address then refused for a minute). With the test's insert of the MAC waiting to commit,
    the router's first call is let in, and its address registers its next new router."""
    token = "fleet-token-0123456789"
    client = await make_client(settings_for(database, tmp_path, ROUTER_AUTH="key",
                                            ENROLLMENT_TOKEN=token)
                               if first_call == "enroll" else settings_for(database, tmp_path))
    here = {"X-Forwarded-For": "203.0.113.45"}

    async def call(mac: str) -> int:
        if first_call == "poll":
            return await poll(client, mac, **here)
        response = await client.post("/enroll", headers={
            "X-ID": mac, "Authorization": f"Bearer {token}", **here})
        return response.status
    inserter = connect(database)
    try:
        inserter.execute("INSERT INTO routers (mac, registered_from) VALUES (%s, %s)",
                         ("02:2d:00:00:00:01", "198.51.100.45"))
        racer = asyncio.create_task(call("02:2d:00:00:00:01"))
        assert await settled(lambda: statements_active(sql, "WITH registered AS")) == 1
        inserter.commit()
    finally:
        inserter.close()
    admitted = 200 if first_call == "poll" else 201
    assert await racer == admitted
    assert await call("02:2d:00:00:00:02") == admitted


async def test_an_ipv6_network_counts_as_one_address(make_client, database, tmp_path, sql):
    """Issue 27, finding 3: 200 new MACs from 200 addresses of one /64 all registered."""
    client = await make_client(settings_for(database, tmp_path,
                                            REGISTRATIONS_PER_MINUTE_PER_ADDRESS="30"))
    statuses = [await poll(client, mac, **{"X-Forwarded-For": f"2001:db8:27:1::{n + 1:x}"})
                for n, mac in enumerate(new_macs(200))]
    assert statuses.count(200) == 30
    # Another /64 has its own allowance; an IPv4-mapped address counts as its IPv4 one.
    assert await poll(client, "02:27:01:00:00:01",
                      **{"X-Forwarded-For": "2001:db8:27:2::1"}) == 200
    forms = ["::ffff:198.51.100.7", "198.51.100.7"]
    mapped = [await poll(client, mac, **{"X-Forwarded-For": forms[n % 2]})
              for n, mac in enumerate(new_macs(40, "02:28"))]
    assert mapped.count(200) == 30


async def test_enrollment_counts_against_the_registration_limit(make_client, database,
                                                                tmp_path, sql):
    """Issue 27, finding 3: /enroll had no per-address limit (300 enrollments, 300 x 201)."""
    settings = settings_for(database, tmp_path, ROUTER_AUTH="key",
                            ENROLLMENT_TOKEN="fleet-token-0123456789",
                            REGISTRATIONS_PER_MINUTE_PER_ADDRESS="30")
    client = await make_client(settings)

    async def enroll(mac: str) -> int:
        response = await client.post("/enroll", headers={
            "X-ID": mac, "Authorization": "Bearer fleet-token-0123456789",
            "X-Forwarded-For": "203.0.113.28"})
        return response.status
    statuses = await asyncio.gather(*(enroll(mac) for mac in new_macs(100)))
    assert statuses.count(201) == 30 and statuses.count(429) == 70
    assert sql.value("SELECT count(*) FROM router_keys") == 30
    # A burst of them waits its turn in the process, not on database connections.
    with bucket_held(database, "203.0.113.28"):
        burst = [asyncio.create_task(enroll(mac)) for mac in new_macs(20, "02:2b")]
        assert await settled(lambda: registrations_waiting(sql)) == 1
    assert await asyncio.gather(*burst) == [429] * 20
    # A router registered before, without a key yet, still enrolls from the full address.
    sql.rows("INSERT INTO routers (mac, registered_by) VALUES ('02:2c:00:00:00:00', 'operator')")
    assert await enroll("02:2c:00:00:00:00") == 201


async def test_failed_credentials_are_throttled_and_logged_once_a_minute(
        make_client, database, tmp_path, sql, caplog):
    """Issue 27, finding 6: 2,000 wrong enrollment tokens and 2,000 wrong router keys were
    each answered 401 with one WARNING line per attempt."""
    settings = settings_for(database, tmp_path, ROUTER_AUTH="key",
                            ENROLLMENT_TOKEN="fleet-token-0123456789",
                            FAILED_CREDENTIALS_PER_MINUTE_PER_ADDRESS="10")
    client = await make_client(settings)
    guesser = {"X-Forwarded-For": "203.0.113.66"}
    honest = {"X-Forwarded-For": "198.51.100.66"}
    enrolled = await client.post("/enroll", headers={
        "X-ID": OTHER, "Authorization": "Bearer fleet-token-0123456789", **honest})
    key = (await enrolled.json())["key"]
    with caplog.at_level(logging.WARNING, logger="router_backend.trust"):
        tokens = [(await client.post("/enroll", headers={
            "X-ID": FLOODER, "Authorization": f"Bearer guess-{n}", **guesser})).status
            for n in range(100)]
        keys = [(await client.get("/rules/last_updated", headers={
            "X-ID": OTHER, "Authorization": f"Bearer guess-{n}", **guesser})).status
            for n in range(100)]
        right_key_from_there = await client.get("/rules/last_updated", headers={
            "X-ID": OTHER, "Authorization": f"Bearer {key}", **guesser})
    assert tokens == [401] * 10 + [429] * 90 and keys == [429] * 100
    assert int(right_key_from_there.headers["Retry-After"]) >= 1
    assert right_key_from_there.status == 429  # a guess that is right gets no 200 either
    lines = [r.getMessage() for r in caplog.records if "failed credentials" in r.getMessage()]
    assert len(lines) == 1 and "203.0.113.66" in lines[0]
    # The router with its key, from its own address, is not affected.
    assert (await client.get("/rules/last_updated", headers={
        "X-ID": OTHER, "Authorization": f"Bearer {key}", **honest})).status == 200


async def test_concurrent_wrong_keys_are_checked_no_more_than_the_allowance(
        make_client, database, tmp_path):
    """Issue 44: 300 wrong router keys from one address at once. Each guess takes its place
    in the allowance before its key is looked up, so 10 are checked (401) and the rest get
    429; before, every guess in flight passed the same check (68 of 300 checked)."""
    settings = settings_for(database, tmp_path, ROUTER_AUTH="key",
                            ENROLLMENT_TOKEN="fleet-token-0123456789",
                            TRUSTED_PROXIES="127.0.0.1/32",
                            FAILED_CREDENTIALS_PER_MINUTE_PER_ADDRESS="10")
    client = await make_client(settings)
    enrolled = await client.post("/enroll", headers={
        "X-ID": OTHER, "Authorization": "Bearer fleet-token-0123456789"})
    assert enrolled.status == 201

    async def status(method: str, path: str, mac: str, n: int, address: str) -> int:
        async with client.request(method, path, headers={
                "X-ID": mac, "Authorization": f"Bearer guess-{n}",
                "X-Forwarded-For": address}) as answer:
            return answer.status
    keys = Counter(await asyncio.gather(*(
        status("GET", "/rules/last_updated", OTHER, n, "203.0.113.67") for n in range(300))))
    assert keys == {401: 10, 429: 290}, keys
    tokens = Counter(await asyncio.gather(*(
        status("POST", "/enroll", FLOODER, n, "203.0.113.68") for n in range(100))))
    assert tokens == {401: 10, 429: 90}, tokens


def test_more_live_addresses_than_are_kept_are_pruned_now_and_then(monkeypatch):
    """Found by reading it: past PRUNE_ABOVE addresses each still counted, every new one
    pruned the whole table again, a pass over all of them per request. Now the next prune
    waits for the table to double: 1,000 addresses past a bound of 100, 4 passes (899
    before), and none of them forgotten."""
    monkeypatch.setattr(limits, "PRUNE_ABOVE", 100)
    buckets = limits.Buckets(10)
    passes = []
    prune = buckets._prune
    monkeypatch.setattr(buckets, "_prune", lambda now: (passes.append(now), prune(now)))
    addresses = [f"192.0.2.{n // 256}.{n % 256}" for n in range(1000)]
    for address in addresses:
        assert buckets.take(address, 1, 1000.0) == 0.0
    assert len(passes) == 4
    assert all(buckets.available(address, 1000.0) == 9 for address in addresses)


async def test_a_refusal_is_sent_a_second_late_and_keeps_no_one_else_waiting(
        make_client, database, tmp_path):
    """TOO_MANY_REQUESTS_DELAY_SECONDS (1 by default): a router that sends again at once on
    being refused, on one connection, gets about one answer a second, each a 429 with
    Retry-After and the JSON error; another router's polls meanwhile are answered at once,
    and the refusals' time in the request metrics leaves the delay out."""
    client = await make_client(settings_for(database, tmp_path, ROUTER_REQUESTS_PER_MINUTE="2",
                                            TOO_MANY_REQUESTS_DELAY_SECONDS="1"))
    assert [await poll(client, FLOODER) for _ in range(2)] == [200, 200]

    async def flooder() -> list[int]:
        statuses, began = [], time.monotonic()
        while time.monotonic() - began < 3.0:  # sending again at once, as a flood does
            statuses.append(await poll(client, FLOODER))
        return statuses

    async def other() -> list[float]:  # its own 2 a minute, while the flooder is refused
        took = []
        for _ in range(2):
            await asyncio.sleep(0.5)
            began = time.monotonic()
            assert await poll(client, OTHER) == 200
            took.append(time.monotonic() - began)
        return took

    refused, others = await asyncio.gather(flooder(), other())
    assert set(refused) == {429} and 3 <= len(refused) <= 4, refused
    assert max(others) < 0.5, others
    samples = await (await client.get("/metrics")).text()
    seconds = [float(line.split()[-1]) for line in samples.splitlines() if line.startswith(
        'http_request_duration_seconds_sum{route="/rules/last_updated"}')]
    assert seconds and seconds[0] < 1.0, seconds  # 5+ refusals and polls, none timed at 1 s


def test_a_refusal_waits_no_longer_than_its_retry_after():
    answer = web.Response(status=429, headers={"Retry-After": "2"})
    assert middleware.refusal_delay(answer, 10) == 2
    assert middleware.refusal_delay(answer, 1) == 1
    assert middleware.refusal_delay(web.Response(status=429), 3) == 3
    assert middleware.refusal_delay(web.Response(status=429, headers={
        "Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}), 1) == 1


async def test_past_the_refusals_a_process_delays_at_once_they_are_answered_at_once(
        make_client, database, tmp_path, monkeypatch):
    """Each delayed refusal holds its request (and what arrived of its body) for the delay:
    at most REFUSALS_DELAYED_AT_ONCE at a time, 2 here, so 6 refusals sent together: 2 a
    second late, 4 at once, with their connections closed (a red team's 4,000 connections
    from one address, each refused again at once, took an honest upload from 5 to 692 ms)."""
    monkeypatch.setattr(middleware, "REFUSALS_DELAYED_AT_ONCE", 2)
    client = await make_client(settings_for(database, tmp_path, ROUTER_REQUESTS_PER_MINUTE="1",
                                            TOO_MANY_REQUESTS_DELAY_SECONDS="1"))
    assert await poll(client, FLOODER) == 200

    async def timed_poll() -> tuple[int, float, str | None]:
        began = time.monotonic()
        async with client.get("/rules/last_updated", headers={"X-ID": FLOODER}) as answer:
            return answer.status, time.monotonic() - began, answer.headers.get("Connection")

    answers = sorted(await asyncio.gather(*(timed_poll() for _ in range(6))),
                     key=lambda answer: answer[1])
    assert {status for status, _, _ in answers} == {429}
    assert max(took for _, took, _ in answers[:4]) < 0.5, answers
    assert min(took for _, took, _ in answers[4:]) >= 0.9, answers
    assert [closed for _, _, closed in answers] == ["close"] * 4 + [None] * 2, answers


class _Transport(asyncio.Transport):
    def __init__(self, closing: bool) -> None:
        super().__init__()
        self._closing = closing

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name, default=None):
        return default


async def test_a_refusal_whose_client_is_gone_is_not_delayed():
    """A hostile review: aiohttp does not cancel a handler whose client hung up, so a
    refusal delayed after it held its request (and its body's buffer) for nothing: 1,850
    uploads a second sent and dropped at once held 342 MiB where 134 without the delay."""
    refusals = middleware.RefusalDelay(60.0)
    refused = web.Response(status=429, headers={"Retry-After": "60"})
    gone = make_mocked_request("GET", "/rules/last_updated", transport=_Transport(True))
    here = make_mocked_request("GET", "/rules/last_updated", transport=_Transport(False))
    await asyncio.wait_for(refusals.hold(gone, refused), 5)  # at once, not in 60 s
    waiting = asyncio.create_task(refusals.hold(here, refused))
    await asyncio.sleep(0)
    assert refusals.waiting == 1 and not waiting.done()
    waiting.cancel()


async def test_an_intel_delta_that_falls_back_to_the_document_counts_once(
        make_client, database, tmp_path):
    """A delta asked against an ETag this process does not know is answered the whole
    document: the router's request was admitted twice on that path, each taking its
    budget, so a router polling its intel by delta got half its allowance."""
    client = await make_client(settings_for(database, tmp_path, ROUTER_REQUESTS_PER_MINUTE="2",
                                            TOO_MANY_REQUESTS_DELAY_SECONDS="0"))
    answer = await client.get("/rules/intel?delta=1", headers={
        "X-ID": FLOODER, "If-None-Match": '"not-known-here"'})
    assert answer.status == 200, await answer.text()
    assert await poll(client, FLOODER) == 200  # the second of its two a minute
    assert await poll(client, FLOODER) == 429
