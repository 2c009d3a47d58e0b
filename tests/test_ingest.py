"""Telemetry ingestion over real HTTP into the real database."""

from __future__ import annotations

import asyncio
import logging
import gzip
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import orjson
import pytest

from testkit import FIXTURES
from testkit.corpus import corpus_path
from testkit.database import settings_for
from testkit.tcp_proxy import TcpProxy
from testkit.telemetry import stored_count, telemetry

MAC = "aa:bb:cc:00:00:02"
X_ID = {"X-ID": MAC}
NDJSON = {**X_ID, "Content-Type": "application/x-ndjson"}
JSON = {**X_ID, "Content-Type": "application/json"}
SAMPLE = (FIXTURES / "eve-sample.ndjson").read_bytes()
SAMPLE_RECORDS = [json.loads(line) for line in SAMPLE.splitlines()]


def count(sql, kind="events"):
    return stored_count(sql, kind)


async def post(client, body, headers=NDJSON, path="/log/events"):
    response = await client.post(path, data=body, headers=headers)
    return response.status, await response.json()


async def test_ndjson_records_stored_with_extracted_columns(client, sql):
    status, body = await post(client, SAMPLE)
    unread = body.pop("unread")  # flows, stats and dns sent to /log/events (issue 54)
    assert (status, body) == (200, {"accepted": 7, "rejected": 0, "errors": []})
    assert unread["records"] == 4 and unread["event_types"] == {"flow": 2, "stats": 1, "dns": 1}
    rows = telemetry(sql).rows(
        "SELECT mac::text, event_type, host(src_ip), src_port, host(dest_ip), dest_port, "
        "proto, app_proto, signature_id, severity, event_time, record "
        "FROM ids_events ORDER BY chunk_id, ordinal")
    assert [row[-1] for row in rows] == SAMPLE_RECORDS
    first = rows[0]
    assert first[:10] == (MAC, "alert", "203.0.113.50", 4431, "192.168.1.20", 22, "TCP", None,
                          2001219, 2)
    assert first[10].isoformat() == "2026-03-02T10:15:01.104233+00:00"
    assert rows[2][2] == "2001:db8::66"  # IPv6 kept as inet
    assert rows[5][2] is None and rows[5][8] is None  # stats: no addresses, no signature


async def test_json_array_and_cfm_table(client, sql):
    status, body = await post(client, orjson.dumps(SAMPLE_RECORDS), JSON, "/log/cfm")
    assert (status, body["accepted"]) == (200, 7)
    assert count(sql, "cfm") == 7 and count(sql) == 0
    assert telemetry(sql).value(
        "SELECT record FROM cfm_records ORDER BY chunk_id, ordinal LIMIT 1") == SAMPLE_RECORDS[0]


async def test_pretty_printed_array_with_nested_brackets_in_strings(client, sql):
    records = [{"event_type": "alert", "note": "a ] tricky [ {string} \" with , stuff\\"},
               {"event_type": "flow", "nested": [[1, 2], {"x": [3]}]}]
    status, body = await post(client, json.dumps(records, indent=2).encode(), JSON)
    assert (status, body["accepted"]) == (200, 2)
    assert [r[0] for r in telemetry(sql).rows(
        "SELECT record FROM ids_events ORDER BY chunk_id, ordinal")] == records


async def test_gzip_body(client, sql):
    headers = {**NDJSON, "Content-Encoding": "gzip"}
    status, body = await post(client, gzip.compress(SAMPLE), headers)
    assert (status, body["accepted"]) == (200, 7)
    assert count(sql) == 7


async def test_bad_records_are_reported_and_the_rest_stored(client, sql):
    lines = [SAMPLE.splitlines()[0], b"{not json", b"[1, 2]", b"",
             b'{"src_ip": "999.1.1.1"}', b'{"dest_port": "http"}', b'{"timestamp": "yesterday"}',
             b'{"alert": {"signature_id": -4}}', b'{"msg": "nul \\u0000 here"}',
             b'{"event_type": "flow", "ok": true}']
    status, body = await post(client, b"\n".join(lines))
    assert status == 200
    assert body["accepted"] == 2 and body["rejected"] == 7
    by_line = {e["line"]: e["error"] for e in body["errors"]}
    assert set(by_line) == {2, 3, 5, 6, 7, 8, 9}
    assert "invalid JSON" in by_line[2] and "not a JSON object" in by_line[3]
    assert "src_ip" in by_line[5] and "dest_port" in by_line[6] and "timestamp" in by_line[7]
    assert "signature_id" in by_line[8] and "NUL" in by_line[9]
    assert count(sql) == 2


# Values at the edges of what PostgreSQL stores (issue 13: one `1E-20000` in a body of
# 10,001 records failed the whole request with 500, and the agent's retry failed forever).
STORABLE = [b'{"n": 1e-16383}', b'{"n": 0.' + b"1" * 16383 + b"}", b'{"n": 0e999999}',
            b'{"n": -1.7976931348623157e308}', b'{"n": 5e-324}', b'{"n": "1e-99999"}',
            b'{"timestamp": "2026-03-02T10:00:00+15:59"}',
            b'{"timestamp": "2026-03-02T10:00:00+20:00"}',
            b'{"timestamp": "0001-01-01T00:00:00+00:00"}',
            b'{"alert": {"signature_id": 9223372036854775807, "severity": 255}}']
REFUSED = {b'{"n": 1E-20000}': "digits after the decimal point",
           b'{"n": 1.5e-16383}': "digits after the decimal point",
           b'{"n": 0.' + b"1" * 16384 + b"}": "digits after the decimal point",
           b'{"n": 0e-999999}': "digits after the decimal point",
           b'{"n": 1e400}': "invalid JSON",
           b'{"n": "\\ud800"}': "invalid JSON",
           b'{"timestamp": "9999-12-31T23:00:00-05:00"}': "timestamp: out of range",
           b'{"timestamp": "0001-01-01T00:00:00+05:00"}': "timestamp: out of range"}


async def test_values_postgresql_refuses_are_rejected_per_record(client, sql):
    lines = STORABLE + list(REFUSED) + [SAMPLE.splitlines()[0]]
    status, body = await post(client, b"\n".join(lines))
    assert status == 200, body
    assert (body["accepted"], body["rejected"]) == (len(STORABLE) + 1, len(REFUSED))
    errors = {e["line"]: e["error"] for e in body["errors"]}
    for line, expected in enumerate(REFUSED.values(), start=len(STORABLE) + 1):
        assert expected in errors[line], (line, errors[line])
    assert count(sql) == len(STORABLE) + 1
    # Stored as sent, the zone offset PostgreSQL refuses turned into UTC in the column.
    assert telemetry(sql).value("SELECT count(*) FROM ids_events "
                     "WHERE jsonb_typeof(record->'n') = 'number'") == 5
    assert telemetry(sql).value("SELECT event_time FROM ids_events WHERE record->>'timestamp' "
                     "LIKE '%+20:00'") == datetime(2026, 3, 1, 14, 0, tzinfo=timezone.utc)


async def test_error_list_is_capped_but_count_exact(make_client, database, tmp_path):
    client = await make_client(settings_for(database, tmp_path, INGEST_MAX_REPORTED_ERRORS="3"))
    status, body = await post(client, b"x\n" * 50)
    # Nothing stored: 422 (issue 54), its answer still counting every rejection
    assert status == 422 and body["rejected"] == 50 and len(body["errors"]) == 3


@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream",
                                          "multipart/form-data"])
async def test_other_content_types_are_415(client, sql, content_type):
    status, body = await post(client, SAMPLE, {**X_ID, "Content-Type": content_type})
    assert status == 415 and "Content-Type" in body["error"]
    assert count(sql) == 0


async def test_unknown_content_encoding_is_415(client, sql):
    status, body = await post(client, SAMPLE, {**NDJSON, "Content-Encoding": "br"})
    assert status == 415 and "Content-Encoding" in body["error"]


@pytest.mark.parametrize("body", [b'{"a": 1}', b"[{}, ", b"[{},,{}]", b"[{}] trailing",
                                  b"[{}}", b"[1,]"])
async def test_unparseable_array_is_400(client, sql, body):
    status, reply = await post(client, body, JSON)
    assert status == 400 and reply["error"]
    assert count(sql) == 0


async def test_broken_gzip_is_400_and_stores_nothing(client, sql):
    packed = gzip.compress(SAMPLE * 50)
    for body in (packed[: len(packed) // 2], b"not gzip at all"):
        status, reply = await post(client, body, {**NDJSON, "Content-Encoding": "gzip"})
        assert status == 400 and "gzip" in reply["error"]
    assert count(sql) == 0


async def test_declared_oversize_is_413(make_client, database, tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path, INGEST_MAX_BODY_BYTES="1000"))
    status, body = await post(client, SAMPLE * 10)
    assert status == 413 and "limit" in body["error"]
    assert count(sql) == 0


async def test_streamed_oversize_is_413_after_batches_were_written(make_client, database,
                                                                   tmp_path, sql):
    settings = settings_for(database, tmp_path, INGEST_MAX_BODY_BYTES=str(len(SAMPLE) * 30),
                            INGEST_BATCH_ROWS="10")

    async def chunked():  # no Content-Length: the cap is found while streaming
        for _ in range(60):
            yield SAMPLE

    client = await make_client(settings)
    status, body = await post(client, chunked())
    assert status == 413
    assert count(sql) == 0


async def test_gzip_bomb_is_413(make_client, database, tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path,
                                            INGEST_MAX_BODY_BYTES=str(10 * 1024 * 1024)))
    bomb = gzip.compress(b" " * (200 * 1024 * 1024))  # 200 MiB of whitespace in ~200 KiB
    status, body = await post(client, bomb, {**NDJSON, "Content-Encoding": "gzip"})
    assert status == 413
    assert count(sql) == 0


async def test_oversized_record_rejected_rest_kept(make_client, database, tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path, INGEST_MAX_RECORD_BYTES="2000"))
    huge = orjson.dumps({"event_type": "alert", "pad": "x" * 5000})
    status, body = await post(client, SAMPLE + huge + b"\n" + SAMPLE)
    assert status == 200 and body["accepted"] == 14 and body["rejected"] == 1
    assert body["errors"][0]["line"] == 8 and "size limit" in body["errors"][0]["error"]
    status, body = await post(client, b"[" + huge + b"," + orjson.dumps(SAMPLE_RECORDS[0]) + b"]",
                              JSON)
    assert status == 200 and (body["accepted"], body["rejected"]) == (1, 1)


async def test_malformed_array_after_flushed_batches_stores_nothing(make_client, database,
                                                                    tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path, INGEST_BATCH_ROWS="5"))
    good = b",".join(orjson.dumps(r) for r in SAMPLE_RECORDS * 20)
    status, body = await post(client, b"[" + good + b", {} }", JSON)
    assert status == 400
    assert count(sql) == 0


async def test_client_that_vanishes_mid_body_stores_nothing(make_client, database, tmp_path,
                                                            sql, unused_tcp_port_factory):
    client = await make_client(settings_for(database, tmp_path, INGEST_BATCH_ROWS="5"))
    # Announce a long body, send part of it over a raw socket, then hang up.
    reader, writer = await asyncio.open_connection(client.host, client.port)
    body = SAMPLE * 20
    writer.write(b"POST /log/events HTTP/1.1\r\nHost: x\r\nX-ID: " + MAC.encode() +
                 b"\r\nContent-Type: application/x-ndjson\r\n"
                 b"Content-Length: " + str(len(body) * 2).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    await asyncio.sleep(0.3)
    writer.transport.abort()
    await asyncio.sleep(0.5)
    assert count(sql) == 0
    status, reply = await post(client, SAMPLE)  # the service carries on
    assert status == 200 and count(sql) == 7


@pytest.fixture
async def proxied(database, tmp_path, make_client):
    proxy = await TcpProxy(database.host, database.port).start()
    location = proxy.location(database)
    client = await make_client(settings_for(location, tmp_path, INGEST_BATCH_ROWS="5",
                                            DB_TIMEOUT_SECONDS="2",
                                            DB_RETRY_AFTER_SECONDS="7"))
    yield client, proxy
    await proxy.close()


async def test_database_away_gives_503_then_recovers(proxied, sql):
    client, proxy = proxied
    status, _ = await post(client, SAMPLE)
    assert status == 200
    proxy.go_down()
    for path in ("/log/events", "/rules/last_updated"):
        response = await client.request("POST" if path.startswith("/log") else "GET", path,
                                        data=SAMPLE, headers=NDJSON)
        assert response.status == 503
        assert response.headers["Retry-After"] == "7"
        assert "database" in (await response.json())["error"]
    health = await client.get("/health", headers=X_ID)
    assert health.status == 503 and (await health.json())["status"] == "unavailable"
    proxy.come_back()
    status, body = await post(client, SAMPLE)
    assert (status, body["accepted"]) == (200, 7)
    assert count(sql) == 14


async def test_database_lost_mid_body_stores_nothing(proxied, sql):
    client, proxy = proxied

    async def body():
        for n in range(40):
            if n == 20:
                proxy.go_down()  # batches of 5 rows were already written in the transaction
            yield SAMPLE

    status, reply = await post(client, body())
    assert status == 503
    proxy.come_back()
    assert count(sql) == 0


async def test_corpus_files_as_ndjson_and_array(client, sql):
    for name in ("lab-zeus-eve.json", "lab-sensor-eve.json"):
        data = corpus_path("eve", name).read_bytes()
        lines = [line for line in data.splitlines() if line.strip()]
        alerts = [line for line in lines if orjson.loads(line).get("event_type") == "alert"]
        flows = [line for line in lines if orjson.loads(line).get("event_type") == "flow"]
        status, body = await post(client, b"\n".join(alerts))
        assert (status, body["accepted"], body["rejected"]) == (200, len(alerts), 0)
        status, body = await post(client, b"[" + b",".join(flows) + b"]", JSON, "/log/cfm")
        assert (status, body["accepted"], body["rejected"]) == (200, len(flows), 0)
    # Columns hold what the records say; every record is exported once, as sent.
    stored = telemetry(sql)
    mismatches = stored.value(
        "SELECT count(*) FROM ids_events WHERE signature_id IS DISTINCT FROM "
        "(record->'alert'->>'signature_id')::bigint OR src_ip <> (record->>'src_ip')::inet "
        "OR event_time <> (record->>'timestamp')::timestamptz")
    assert mismatches == 0
    assert stored.value("SELECT count(*) FROM ids_events WHERE signature_id IS NULL") == 0
    assert stored.value("SELECT count(*) FROM cfm_records WHERE dest_port IS NULL "
                        "AND proto IN ('TCP', 'UDP')") == 0


@pytest.fixture
async def one_connection_proxied(database, tmp_path, make_client):
    """Uploads through one pooled connection, behind a proxy that can lose one direction."""
    proxy = await TcpProxy(database.host, database.port).start()
    location = proxy.location(database)
    client = await make_client(settings_for(location, tmp_path, INGEST_DB_POOL_MAX="1",
                                            DB_TIMEOUT_SECONDS="2"))
    yield client, proxy
    await proxy.close()


async def test_commit_whose_answer_was_lost_is_answered_as_stored(one_connection_proxied,
                                                                  sql):
    """Issue 24 (fault drill: 2 batches answered 503 but stored). The statement that
    commits runs, its answer never arrives: the server ends that session, finds the rows and
    answers 200, so the router does not send them again."""
    client, proxy = one_connection_proxied
    assert (await post(client, SAMPLE))[0] == 200  # the pool's one connection is open
    proxy.lose_when_sent(b"INSERT INTO telemetry_chunks", "to_client")
    status, body = await post(client, SAMPLE)
    assert (status, body["accepted"]) == (200, 7)
    proxy.restore()
    assert count(sql) == 14


async def test_commit_that_never_arrived_is_answered_as_not_stored_and_never_lands(
        one_connection_proxied, sql):
    """The statement that commits is held on the way: 503, and the session that would run
    it is ended first, so it cannot commit after the answer when the network heals."""
    client, proxy = one_connection_proxied
    assert (await post(client, SAMPLE))[0] == 200
    proxy.lose_when_sent(b"INSERT INTO telemetry_chunks", "to_server")
    status, body = await post(client, SAMPLE)
    assert status == 503 and "stored" not in body
    proxy.restore()
    await asyncio.sleep(0.5)
    assert count(sql) == 7


async def test_an_outage_is_logged_once_not_per_request(proxied, caplog):
    """Issue 24's fault drill: one warning per request answered 503 (3,265 in one run)."""
    client, proxy = proxied
    proxy.go_down()
    with caplog.at_level(logging.WARNING, logger="router_backend.http"):
        for _ in range(5):
            assert (await client.get("/rules/last_updated", headers=X_ID)).status == 503
    lines = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert len(lines) == 1
    proxy.come_back()


async def test_a_small_upload_does_not_wait_for_the_threads(client, sql):
    """The threads that bind large writes all busy (other uploads' binds, the jobs' work):
    an agent's small upload is bound on the event loop and answered without them."""
    loop = asyncio.get_running_loop()
    threads = ThreadPoolExecutor(max_workers=2)
    loop.set_default_executor(threads)  # (this test's loop: a pool it can fill)
    busy = [loop.run_in_executor(None, time.sleep, 1.5) for _ in range(4)]
    try:
        started = time.monotonic()
        status, _ = await post(client, SAMPLE)
        # Bound on a thread, it would start once two rounds of sleeps ended (3 s): the rest
        # is margin for a loaded machine.
        assert status == 200 and time.monotonic() - started < 2.5
    finally:
        await asyncio.gather(*busy)
    assert sql.value("SELECT count(*) FROM telemetry_chunks") == 1
