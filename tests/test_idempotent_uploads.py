"""Idempotency-Key on telemetry uploads (issue 25): a retry of a stored upload is answered
the first answer and stores nothing; the key with another body is 422; keys are per router
and endpoint, checked for form, and expire by the hourly job."""

from __future__ import annotations

import asyncio
import gzip

import aiohttp
import orjson
import pytest

from server.telemetry import upload_key_sql as upload_keys
from server.db.lifecycle import open_database
from testkit import FIXTURES
from testkit.database import settings_for
from testkit.telemetry import stored_count
from testkit.tcp_proxy import TcpProxy
from testkit.waiting import wait_for

MAC, OTHER_MAC = "aa:bb:cc:00:00:25", "aa:bb:cc:00:00:26"
SAMPLE = (FIXTURES / "eve-sample.ndjson").read_bytes()  # 7 records
NDJSON = {"X-ID": MAC, "Content-Type": "application/x-ndjson"}


def keyed(key: str, mac: str = MAC, **more: str) -> dict:
    return {**NDJSON, "X-ID": mac, "Idempotency-Key": key, **more}


async def post(client, body, headers, path="/log/events"):
    response = await client.post(path, data=body, headers=headers)
    return response.status, await response.json(), response.headers


def stored(sql, kind="events") -> int:
    return stored_count(sql, kind)


async def test_a_repeat_is_answered_the_first_answer_and_stores_nothing(client, sql):
    body = SAMPLE + b'{"event_type": "alert", "src_ip": "not an address"}\n'
    status, first, headers = await post(client, body, keyed("eve.json:0-4096"))
    assert status == 200 and first["accepted"] == 7 and first["rejected"] == 1
    assert "Idempotent-Replayed" not in headers
    # The same body, gzip-encoded this time: the key names the decoded body.
    status, again, headers = await post(client, gzip.compress(body),
                                        keyed("eve.json:0-4096", **{"Content-Encoding": "gzip"}))
    assert (status, again, headers["Idempotent-Replayed"]) == (200, first, "true")
    assert stored(sql) == 7
    status, other, _ = await post(client, SAMPLE, keyed("eve.json:4096-8192"))
    assert (status, other["accepted"], stored(sql)) == (200, 7, 14)


async def test_the_key_with_another_body_is_422_and_stores_nothing(client, sql):
    assert (await post(client, SAMPLE, keyed("batch-1")))[0] == 200
    status, answer, _ = await post(client, SAMPLE + SAMPLE, keyed("batch-1"))
    assert status == 422 and "another body" in answer["error"]
    # The same bytes as another content type are other records: another body.
    array = b"[" + b",".join(SAMPLE.splitlines()) + b"]"
    status, _, _ = await post(client, array, keyed("batch-2", **{"Content-Type":
                                                                 "application/json"}))
    assert status == 200
    status, _, _ = await post(client, array, keyed("batch-2"))  # as NDJSON: one bad record
    assert status == 422
    assert stored(sql) == 14


async def test_keys_are_per_router_and_per_endpoint(client, sql):
    for mac in (MAC, OTHER_MAC):
        for path in ("/log/events", "/log/cfm"):
            status, answer, headers = await post(client, SAMPLE, keyed("same", mac), path)
            assert (status, answer["accepted"]) == (200, 7)
            assert "Idempotent-Replayed" not in headers
    assert stored(sql) == 14 and stored(sql, "cfm") == 14


@pytest.mark.parametrize("key", [b"", b"   ", b'""', b"x" * 256, b"tab\there",
                                 "caf\u00e9".encode(), b"nul\x00byte"])
async def test_a_key_that_is_not_printable_ascii_is_400(client, sql, key):
    status, payload = await raw_post(client, SAMPLE, b"Idempotency-Key: " + key + b"\r\n")
    assert status == 400
    if b"\x00" not in key:  # (a NUL is refused by aiohttp's parser, in plain text)
        assert "Idempotency-Key" in orjson.loads(payload)["error"]
    assert stored(sql) == 0 and sql.value("SELECT count(*) FROM upload_keys") == 0


async def raw_post(client, body: bytes, header: bytes) -> tuple[int, bytes]:
    """As sent by hand: aiohttp's client refuses some of these headers."""
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(b"POST /log/events HTTP/1.1\r\nHost: x\r\nX-ID: " + MAC.encode() +
                 b"\r\nContent-Type: application/x-ndjson\r\n" + header +
                 b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n"
                 b"\r\n" + body)
    answer = await reader.read()
    writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), payload


async def test_two_keys_and_the_quoted_form(client, sql):
    status, _, _ = await post(client, SAMPLE, {**NDJSON, "Idempotency-Key": '"quoted-1"'})
    assert status == 200
    status, _, headers = await post(client, SAMPLE, keyed("quoted-1"))  # the same key, bare
    assert (status, headers.get("Idempotent-Replayed")) == (200, "true")
    response = await client.post("/log/events", data=SAMPLE, headers=[
        *NDJSON.items(), ("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
    assert response.status == 400
    assert stored(sql) == 7


async def test_a_refused_upload_records_no_key_and_its_retry_stores(client, sql):
    status, _, _ = await post(client, b"\x1f\x8b not gzip",
                              keyed("retry-me", **{"Content-Encoding": "gzip"}))
    assert status == 400
    status, answer, headers = await post(client, SAMPLE, keyed("retry-me"))
    assert (status, answer["accepted"], stored(sql)) == (200, 7, 7)
    assert "Idempotent-Replayed" not in headers


async def test_many_batches_in_one_transaction_with_the_key(database, tmp_path, make_client,
                                                            sql):
    client = await make_client(settings_for(database, tmp_path, INGEST_BATCH_ROWS="2"))
    first = await post(client, SAMPLE, keyed("big"))
    again = await post(client, SAMPLE, keyed("big"))
    assert first[:2] == again[:2] and first[1]["accepted"] == 7
    assert again[2]["Idempotent-Replayed"] == "true" and stored(sql) == 7
    # No record: 422 and nothing stored, the key neither (issue 54), so the same key with
    # the body meant goes through.
    empty = await post(client, b"", keyed("empty"))
    assert empty[0] == 422 and empty[1]["accepted"] == 0
    assert (await post(client, SAMPLE, keyed("empty")))[0] == 200


@pytest.mark.parametrize("batch_rows", ["2", "2000"])
async def test_a_repeat_sent_while_the_first_is_in_progress_stores_once(
        database, tmp_path, make_client, sql, batch_rows):
    """The first upload is still streaming when the repeat arrives and commits: the first
    then finds the key taken at its commit, rolls back, and answers the repeat's answer."""
    client = await make_client(settings_for(database, tmp_path, INGEST_BATCH_ROWS=batch_rows))
    release = asyncio.Event()

    async def held_body():
        yield SAMPLE[:200]
        await release.wait()
        yield SAMPLE[200:]

    first = asyncio.ensure_future(client.post("/log/events", data=held_body(),
                                              headers=keyed("racing")))
    await asyncio.sleep(0.3)
    status, answer, headers = await post(client, SAMPLE, keyed("racing"))
    assert (status, answer["accepted"]) == (200, 7) and "Idempotent-Replayed" not in headers
    release.set()
    response = await first
    assert response.status == 200 and await response.json() == answer
    assert response.headers["Idempotent-Replayed"] == "true"
    assert stored(sql) == 7


async def test_an_answer_cut_off_after_the_commit_is_retried_and_stored_once(client, sql):
    """The agent's connection is lost after the upload committed: it never hears the answer
    and retries with the same key on a new connection; every record is stored once."""
    proxy = await TcpProxy(client.server.host, client.server.port).start()
    url = f"http://127.0.0.1:{proxy.port}/log/events"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session:
            async with session.get(url.replace("/log/events", "/health"),
                                   headers={"X-ID": MAC}) as response:
                assert response.status == 200  # the connection the upload will reuse
            proxy.hold_open_connections("to_client")  # answers sent now never arrive
            with pytest.raises(asyncio.TimeoutError):
                await session.post(url, data=SAMPLE, headers=keyed("cut-off"))

        async def committed():
            return stored(sql) == 7
        await wait_for(committed, timeout=10)
        async with aiohttp.ClientSession() as session:  # a new connection passes
            async with session.post(url, data=SAMPLE, headers=keyed("cut-off")) as response:
                assert response.status == 200
                assert response.headers["Idempotent-Replayed"] == "true"
                assert (await response.json())["accepted"] == 7
    finally:
        await proxy.close()
    assert stored(sql) == 7


async def test_expired_keys_are_deleted_in_batches_and_then_store_again(settings, client,
                                                                        sql):
    for number in range(5):
        assert (await post(client, SAMPLE, keyed(f"old-{number}")))[0] == 200
    assert (await post(client, SAMPLE, keyed("new")))[0] == 200
    sql.rows("UPDATE upload_keys SET created_at = now() - interval '8 days' "
             "WHERE key LIKE 'old-%%'")
    async with open_database(settings) as db:
        assert await upload_keys.expire(db, days=7, batch_rows=2) == 5
    assert sql.rows("SELECT key FROM upload_keys") == [("new",)]
    status, _, headers = await post(client, SAMPLE, keyed("old-0"))
    assert status == 200 and "Idempotent-Replayed" not in headers
    assert stored(sql) == 7 * 7
