"""Broken and hostile uploads (issue 13): stalled bodies, CPU-heavy bodies, gzip expansions,
empty records. One client must never slow or block the others, and what it sent is refused
whole with a JSON error."""

from __future__ import annotations

import asyncio
import gzip
import io
import time

import pytest

from testkit.database import settings_for
from testkit.telemetry import stored_count

MAC = "aa:bb:cc:00:13:01"
OTHER = "aa:bb:cc:00:13:02"
NDJSON = {"X-ID": MAC, "Content-Type": "application/x-ndjson"}
RECORD = b'{"event_type": "alert", "alert": {"signature_id": 1, "severity": 2}}\n'


def count(sql) -> int:
    return stored_count(sql)


async def stalled_upload(host: str, port: int, first_part: bytes, mac: str = MAC):
    """Announce a body four times `first_part`, send `first_part`, then send nothing."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"POST /log/events HTTP/1.1\r\nHost: x\r\nX-ID: " + mac.encode() +
                 b"\r\nContent-Type: application/x-ndjson\r\nContent-Length: " +
                 str(len(first_part) * 4).encode() + b"\r\n\r\n" + first_part)
    await writer.drain()
    return reader, writer


async def timed_get(client, path: str, mac: str = OTHER) -> tuple[int, float]:
    started = time.perf_counter()
    response = await client.get(path, headers={"X-ID": mac})
    await response.read()
    return response.status, time.perf_counter() - started


async def test_stalled_uploads_are_cut_off_and_never_take_the_pool(make_client, database,
                                                                   tmp_path, sql):
    """25 stalled uploads held every connection idle in transaction; polls, health and the
    generation queue hung, then got 503. Now uploads have a pool of their own and a body
    that stops arriving is answered 408, its transaction rolled back."""
    client = await make_client(settings_for(
        database, tmp_path, INGEST_BATCH_ROWS="5", INGEST_BODY_IDLE_SECONDS="2",
        DB_POOL_MAX="3", INGEST_DB_POOL_MAX="2", DB_TIMEOUT_SECONDS="5"))
    assert (await timed_get(client, "/rules/last_updated"))[0] == 200  # OTHER is registered
    stalls = [await stalled_upload(client.host, client.port, RECORD * 20, f"aa:bb:cc:00:14:{n:02x}")
              for n in range(4)]
    try:
        # Two hold a transaction with batches written; two wait (the pool's spare is for an
        # upload all read).
        await until(lambda: written_and_waiting(sql) == 2)
        await asyncio.sleep(0.5)  # and no more in a while (a wrong third would be seen)
        assert written_and_waiting(sql) == 2
        for path in ("/health", "/rules/last_updated", "/rules/ids"):
            status, seconds = await timed_get(client, path)
            assert status in (200, 404) and seconds < 1, (path, status, seconds)
        for reader, _ in stalls:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 408") and b"Connection: close" in head
    finally:  # a failure above leaves no socket for the next test to find unclosed
        for _, writer in stalls:
            writer.close()
    assert count(sql) == 0 and written_and_waiting(sql) == 0
    status, _ = await timed_get(client, "/rules/last_updated")
    response = await client.post("/log/events", data=RECORD, headers=NDJSON)
    assert (status, response.status, count(sql)) == (200, 200, 1)


async def test_an_upload_served_little_takes_the_pools_spare_connection(
        make_client, database, tmp_path, sql):
    """Two MACs' uploads stalled mid-body (20 records each, batches written) hold the
    pool's connections (INGEST_DB_POOL_MAX); a third like them waits, and so does a fresh
    MAC's stalled after 5 records (served little, but its body still arriving: a body sent
    a byte at a time would hold the spare). A router that sent one record takes the
    spare connection and is answered at once."""
    client = await make_client(settings_for(
        database, tmp_path, INGEST_BATCH_ROWS="5", INGEST_BODY_IDLE_SECONDS="5",
        INGEST_DB_POOL_MAX="2", DB_TIMEOUT_SECONDS="10"))
    stalls = [await stalled_upload(client.host, client.port, RECORD * 20, f"aa:bb:cc:00:15:{n:02x}")
              for n in range(3)]
    await until(lambda: written_and_waiting(sql) == 2)
    stalls.append(await stalled_upload(client.host, client.port, RECORD * 5,
                                       "aa:bb:cc:00:16:01"))
    try:
        await asyncio.sleep(0.5)  # a wrong connection for the third or the fresh one is seen
        assert written_and_waiting(sql) == 2  # the third and the fresh one wait
        started = time.perf_counter()
        response = await client.post("/log/events", data=RECORD,
                                     headers={**NDJSON, "X-ID": OTHER})
        took = time.perf_counter() - started
        # Behind the stalled ones it would wait their idle timeout (5 s): the rest is margin
        # for a loaded machine.
        assert response.status == 200 and took < 3, (response.status, took)
        assert written_and_waiting(sql) == 2
    finally:
        for _, writer in stalls:
            writer.close()
    assert count(sql) == 1  # the router's one record; the stalled ones rolled back


async def test_a_write_waiting_on_a_stalled_uploads_rows_does_not_hold_the_others(
        make_client, database, tmp_path, sql, monkeypatch):
    """An upload's statement waiting on rows another upload of its router holds (a summary
    written with a chunk mid-body, its client then stalling) kept its turn of
    INGEST_WRITES_AT_ONCE as long: every router's upload waited, and so did the stalled
    upload's own next chunk, so its body's idle limit never came and all waited for the
    statement timeout (30 s here). A turn stops counting after WRITE_OVERTIME_SECONDS: the
    other router is answered while the stalled upload still holds its rows, and the stalled
    upload's rest, sent then, is stored before the waiting write, which is stored after."""
    monkeypatch.setattr("server.telemetry.writer.SUMMARY_ROWS", 1)  # a summary each chunk
    client = await make_client(settings_for(
        database, tmp_path, INGEST_BATCH_ROWS="5", INGEST_BODY_IDLE_SECONDS="20",
        INGEST_WRITES_AT_ONCE="1", DB_TIMEOUT_SECONDS="30"))  # no statement cut short
    if time.time() % 3600 > 3590:  # both uploads' summary rows in the same hour
        await asyncio.sleep(3600 - time.time() % 3600 + 0.5)
    reader, writer = await stalled_upload(client.host, client.port, RECORD * 20)
    try:
        await until(lambda: written_and_waiting(sql) == 1)  # its summary rows are held
        blocked = asyncio.create_task(client.post("/log/events", data=RECORD, headers=NDJSON))
        await until(lambda: waiting_on_a_lock(sql) == 1)
        response = await client.post("/log/events", data=RECORD,
                                     headers={**NDJSON, "X-ID": OTHER})
        assert response.status == 200
        assert written_and_waiting(sql) == 1 and not blocked.done()  # both still as they were
        writer.write(RECORD * 60)  # the rest of the stalled body: its next chunks need a turn
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        assert head.startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
    assert (await blocked).status == 200  # not cut short by the statement timeout
    assert count(sql) == 82


def written_and_waiting(sql) -> int:
    """Uploads whose transaction has sent a chunk (its last statement) and waits for more of
    the body: no other transaction of the service (a job's, idle between two statements)."""
    return sql.value("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND state LIKE 'idle in transaction%' "
                     "AND query LIKE 'INSERT INTO telemetry_chunks%'")


def waiting_on_a_lock(sql) -> int:
    """Statements waiting on a lock: here, or on a Citus worker under Citus."""
    if sql.value("SELECT count(*) FROM pg_extension WHERE extname = 'citus'"):
        return sql.value("SELECT count(*) FROM citus_lock_waits")
    return sql.value("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND wait_event_type = 'Lock'")


async def until(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.05)


async def test_one_router_gets_two_uploads_at_once(make_client, database, tmp_path, sql):
    """One MAC's stalled uploads filled the ingestion pool, and every other router's upload
    waited behind them; an agent uploads one body at a time."""
    client = await make_client(settings_for(database, tmp_path, INGEST_BODY_IDLE_SECONDS="2"))
    stalls = [await stalled_upload(client.host, client.port, RECORD) for _ in range(5)]
    statuses = []
    for reader, writer in stalls:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        statuses.append(int(head.split()[1]))
        if statuses[-1] == 429:
            assert b"Retry-After: 5" in head
        writer.close()
    assert sorted(statuses) == [408, 408, 429, 429, 429]
    response = await client.post("/log/events", data=RECORD, headers=NDJSON)
    assert response.status == 200 and count(sql) == 1  # the slots were given back


async def test_stall_answer_is_json(make_client, database, tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path, INGEST_BODY_IDLE_SECONDS="1"))

    async def stalls_after_one_record():
        yield RECORD
        await asyncio.sleep(3)
        yield RECORD

    response = await client.post("/log/events", data=stalls_after_one_record(), headers=NDJSON)
    assert response.status == 408
    assert "stalled" in (await response.json())["error"]
    assert count(sql) == 0


@pytest.mark.parametrize("decoded", [b"{}\n" * 300_000, b"\n" * (30 << 20),
                                     b"[[" + b"," * (10 << 20) + b"]]"])
async def test_gzip_expanding_past_the_ratio_is_413(client, sql, decoded):
    """911 bytes of gzip stored 300,000 empty records; 30 KB decoded to 30 MiB of newlines."""
    packed = gzip.compress(decoded, 9)
    headers = {**NDJSON, "Content-Encoding": "gzip"}
    if decoded.startswith(b"["):
        headers["Content-Type"] = "application/json"
    response = await client.post("/log/events", data=packed, headers=headers)
    assert response.status == 413
    assert "expands more than 200 times" in (await response.json())["error"]
    assert count(sql) == 0


async def test_ordinary_gzip_is_far_below_the_ratio(client, sql):
    # Real EVE output compresses 12-25 times (the corpus), and so do these records.
    body = b"".join(b'{"timestamp": "2026-03-02T10:%02d:%02d.%06d+0000", "flow_id": %d, '
                    b'"event_type": "alert", "alert": {"signature_id": 1, "severity": 2}}\n'
                    % (n // 3600 % 60, n // 60 % 60, n * 7919 % 1000000, 10**15 + n * 131)
                    for n in range(5000))
    assert 10 < len(body) / len(gzip.compress(body, 9)) < 30
    response = await client.post("/log/events", data=gzip.compress(body, 9),
                                 headers={**NDJSON, "Content-Encoding": "gzip"})
    assert response.status == 200 and count(sql) == 5000


async def post_watching_health(client, body: bytes, headers: dict
                               ) -> tuple[object, int, float]:
    """`body` posted to /log/events while /health is polled: the answer, the polls and the
    longest a poll was held up. Each poll is timed with the pause after it, so a stall that
    falls in the pause delays the next poll as much as one that falls in the request."""
    worst = 0.0

    async def watch(done: asyncio.Event) -> int:
        nonlocal worst
        polls = 0
        while not done.is_set():
            started = time.perf_counter()
            status, _ = await timed_get(client, "/health")
            assert status == 200
            await asyncio.sleep(0.01)
            worst, polls = max(worst, time.perf_counter() - started - 0.01), polls + 1
        return polls

    done = asyncio.Event()
    watcher = asyncio.create_task(watch(done))
    response = await client.post("/log/events", data=io.BytesIO(body), headers=headers)
    done.set()
    return response, await watcher, worst


async def test_cpu_heavy_body_never_stalls_other_requests(make_client, database, tmp_path, sql):
    """A 10 KB gzip body of 10 MiB of commas froze every other request for 6 s: the body was
    decoded and split without yielding. Now pieces are small and other requests run between
    them, whatever the ratio allows."""
    client = await make_client(settings_for(database, tmp_path,
                                            INGEST_MAX_GZIP_RATIO="1000000"))
    heavy = gzip.compress(b"[" + b"[]" * (3 << 20) + b"]", 9)  # 6 MiB of brackets
    assert (await timed_get(client, "/health"))[0] == 200
    response, polls, worst = await post_watching_health(client, heavy, {
        **NDJSON, "Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert response.status == 422  # one element, over the record size limit: nothing stored
    assert (await response.json())["rejected"] == 1
    assert polls >= 5 and worst < 0.3, (polls, worst)


async def test_summary_rows_slow_to_quote_never_stall_other_requests(client, sql):
    """Flow ids of quotes take psycopg's quoting (Python) about 25 us each: 400 summary rows
    of 64 such ids each are 0.7 s of binding, which froze every other request while it ran
    on the event loop. It runs on a thread now."""
    rows, ids = 400, 64
    body = b"".join(b'{"event_type": "alert", "flow_id": "%s%02d", "alert": '
                    b'{"signature_id": %d, "severity": 1}}\n' % (b'\\"' * 38, n, row)
                    for row in range(rows) for n in range(ids))
    response, polls, worst = await post_watching_health(client, body, NDJSON)
    assert response.status == 200, await response.text()
    assert (await response.json())["accepted"] == rows * ids
    assert sql.value("SELECT count(*) FROM telemetry_alerts WHERE mac = %s AND "
                     "cardinality(flow_ids) = %s", (MAC, ids)) == rows
    assert polls >= 5 and worst < 0.3, (polls, worst)


async def test_empty_records_are_rejected(client, sql):
    response = await client.post("/log/events", data=b"{}\n" + RECORD + b"{ }\n",
                                 headers=NDJSON)
    body = await response.json()
    assert (body["accepted"], body["rejected"]) == (1, 2)
    assert {error["error"] for error in body["errors"]} == {"record is empty"}
    assert count(sql) == 1
