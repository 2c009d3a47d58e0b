"""Router API over real HTTP: identity, registration, health, activations, rule payloads."""

from __future__ import annotations

import asyncio
import collections
import gzip
import logging
import random
import re
from datetime import datetime

import orjson
import pytest
from aiohttp import web
from multidict import CIMultiDict

from server.web.access_log import AccessLogger, access_logger_for
from server.app import create_app
from server.db.lifecycle import open_database
from testkit.database import settings_for
from testkit.payloads import store_payload_objects
from testkit.server import free_port

MAC = "aa:bb:cc:00:00:01"
HEADERS = {"X-ID": "AA-BB-CC-00-00-01"}


async def test_health_reports_database(client):
    response = await client.get("/health", headers=HEADERS)
    assert response.status == 200
    body = await response.json()
    assert body["status"] == "ok" and body["database"] == "ok"


@pytest.mark.parametrize("path", ["/health", "/rules/last_updated", "/rules/ids",
                                  "/rules/firewall"])
async def test_missing_x_id_is_401(client, path):
    response = await client.get(path)
    assert response.status == 401
    assert "X-ID" in (await response.json())["error"]


@pytest.mark.parametrize("value", ["nonsense", "aa:bb:cc:dd:ee", "gg:bb:cc:dd:ee:ff",
                                   "aa:bb-cc:dd:ee:ff", "aabbccddeeff00"])
async def test_malformed_x_id_is_400(client, value):
    response = await client.get("/rules/last_updated", headers={"X-ID": value})
    assert response.status == 400
    assert "X-ID" in (await response.json())["error"]


@pytest.mark.parametrize("path", ["/health", "/rules/last_updated", "/rules/ids"])
async def test_two_x_id_headers_are_400_and_register_nothing(client, sql, path):
    headers = CIMultiDict([("X-ID", "aa:bb:cc:00:00:02"), ("X-ID", MAC)])
    response = await client.get(path, headers=headers)
    assert response.status == 400
    assert (await response.json()) == {"error": "2 X-ID headers; send exactly one"}
    assert sql.value("SELECT count(*) FROM routers") == 0
    assert sql.value("SELECT count(*) FROM activations") == 0


ACCESS_LINE = re.compile(r'\S+ \S+ INFO aiohttp\.access: \S+ "((?:[^"\\]|\\.)*)" \d{3} \d+ '
                         r'[\d.]+s "((?:[^"\\]|\\.)*)"')


async def raw_request(port: int, head: bytes) -> bytes:
    """Send exactly these header bytes (no client library that would refuse or encode them)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + b"Host: test\r\nConnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    return answer


async def logged_answers(settings, access_lines, heads: list[bytes],
                         access_log_class=AccessLogger) -> tuple[list[bytes], list[str]]:
    """Send each head to the real app behind a runner with this access logger; the answers
    and the access lines written."""
    runner = web.AppRunner(create_app(settings), access_log_class=access_log_class)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        answers = [await raw_request(port, head) for head in heads]
        await asyncio.sleep(0.05)  # the batch is written by a later loop iteration
    finally:
        await runner.cleanup()
    return answers, access_lines()


async def test_access_log_escapes_what_the_client_chose(settings, access_lines):
    """An X-ID or path holding quotes, backslashes or control characters cannot forge log
    fields or lines: one line per request, the client's values escaped inside their quotes."""
    _, lines = await logged_answers(settings, access_lines, [
        b'GET /health?q="a"\\ HTTP/1.1\r\nX-ID: x" 200 0 0.1s "aa:bb:cc:00:00:09\r\n',
        # (aiohttp's parser itself refuses DEL, other controls and line separators in headers)
        b"GET /health HTTP/1.1\r\nX-ID: a\tb\\c\r\n",
        b"GET /health HTTP/1.1\r\nX-ID: aa:bb:cc:00:00:01\r\n"])
    fields = [ACCESS_LINE.fullmatch(line).groups() for line in lines]
    assert fields == [
        (r'GET /health?q=\"a\"\\ HTTP/1.1', r'x\" 200 0 0.1s \"aa:bb:cc:00:00:09'),
        ("GET /health HTTP/1.1", r"a\x09b\\c"),
        ("GET /health HTTP/1.1", "aa:bb:cc:00:00:01")]


async def test_access_log_shows_the_client_behind_a_trusted_proxy(settings, access_lines):
    """Issue 27, finding 8: behind Caddy every access line showed Caddy's address."""
    _, lines = await logged_answers(settings, access_lines, [
        b"GET /health HTTP/1.1\r\nX-ID: aa:bb:cc:00:27:08\r\n"
        b"X-Forwarded-For: 192.0.2.1, 203.0.113.8\r\n",
        b"GET /health HTTP/1.1\r\nX-ID: aa:bb:cc:00:27:08\r\n"],
        access_logger_for(settings.trusted_proxies))
    assert [line.split()[4] for line in lines] == ["203.0.113.8", "127.0.0.1"]


def fuzzed_heads(count: int, seed: int = 27) -> list[bytes]:
    """Request heads a broken or hostile client might send: every byte value in header
    names and values, bad methods and versions, broken separators, empty and huge fields."""
    rng = random.Random(seed)
    heads = [b"GET /health HTTP/1.1\r\nX-ID: a\x01b\r\n",            # issue 27, finding 5
             b"GET /health HTTP/1.1\r\nX-ID: \x7f\r\n",
             b"GET /health HTTP/1.1\r\nX-\x00ID: 1\r\n",
             b"G\x00T /health HTTP/1.1\r\n", b"GET /health HTTP/9.9\r\n",
             b"GET /he\x85alth HTTP/1.1\r\n", b"GET  HTTP/1.1\r\n", b"\r\n",
             b"GET /health HTTP/1.1\r\nX-ID " + b"a" * 9000 + b"\r\n"]
    pieces = [b"GET", b"POST", b"/health", b"/rules/ids", b" ", b"HTTP/1.1", b"\r\n", b":",
              b"X-ID", b"Host", b"Content-Length", b"Transfer-Encoding", b"chunked", b"-1"]
    heads += [b"GET /health HTTP/1.1\r\nX-ID: aa:bb:cc:00:27:05\r\n"] * 5
    for _ in range(count // 10):  # well-formed heads with any printable X-ID
        value = "".join(chr(rng.randrange(0x20, 0x7f)) for _ in range(rng.randrange(40)))
        heads.append(b"GET /health HTTP/1.1\r\nX-ID: " + value.encode() + b"\r\n")
    while len(heads) < count:
        head = b"".join(rng.choice(pieces) if rng.random() < 0.8
                        else bytes([rng.randrange(256)]) for _ in range(rng.randrange(1, 30)))
        heads.append(head + b"\r\n")
    return heads


async def test_access_log_never_raises_on_any_head(settings, access_lines, caplog):
    """Issue 27, finding 5: a header with a control character made the access logger raise
    (`.getall` on the plain dict of a refused request): tracebacks, no access line."""
    heads = fuzzed_heads(300)
    with caplog.at_level(logging.INFO):  # (aiohttp logs each refused head at DEBUG)
        answers, lines = await logged_answers(settings, access_lines, heads)
    failures = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not failures, failures[0].getMessage()
    statuses = collections.Counter(answer[9:12] for answer in answers)
    assert statuses[b"400"] > 200 and statuses[b"200"] > 0, statuses
    assert not [status for status in statuses if status.startswith(b"5")], statuses
    assert sum(statuses.values()) == len(heads)  # every head answered
    assert len(lines) == len(heads)
    assert all(ACCESS_LINE.fullmatch(line) for line in lines)


@pytest.mark.parametrize("value", ["AA:BB:CC:00:00:01", "aa-bb-cc-00-00-01", "aabb.cc00.0001",
                                   "AABBCC000001"])
async def test_router_registered_once_under_normalised_mac(client, sql, value):
    for _ in range(2):
        response = await client.get("/rules/last_updated", headers={"X-ID": value})
        assert response.status == 200
    assert sql.rows("SELECT mac::text, registered_by FROM routers") == [(MAC, "auto")]


async def test_health_neither_registers_nor_writes(client, sql):
    await client.get("/health", headers=HEADERS)
    assert sql.value("SELECT count(*) FROM routers") == 0


async def test_closed_mode_refuses_unsubscribed_routers(make_client, database, tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path, REGISTRATION_MODE="closed"))
    response = await client.get("/rules/last_updated", headers=HEADERS)
    assert response.status == 403
    assert "subscribed" in (await response.json())["error"]
    assert sql.value("SELECT count(*) FROM routers") == 0
    sql.rows("INSERT INTO routers (mac, registered_by) VALUES (%s, 'operator')", (MAC,))
    response = await client.get("/rules/last_updated", headers=HEADERS)
    assert response.status == 200


async def test_last_updated_records_an_activation_per_call(client, sql):
    for expected in (1, 2, 3):
        response = await client.get("/rules/last_updated", headers=HEADERS)
        answer = await response.json()
        assert answer == {"ids_updated_at": None, "firewall_updated_at": None,
                          "fleet_etag": answer["fleet_etag"],
                          "intel_etag": answer["intel_etag"]}
        assert answer["fleet_etag"].startswith('W/"') and answer["intel_etag"].startswith('W/"')
        assert sql.value("SELECT count(*) FROM activations WHERE mac = %s", (MAC,)) == expected


async def store(settings, payloads):
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, payloads)


@pytest.mark.parametrize("kind", ["ids", "firewall"])
async def test_rules_404_until_generated(client, kind):
    response = await client.get(f"/rules/{kind}", headers=HEADERS)
    assert response.status == 404
    assert "no " in (await response.json())["error"]


async def test_rules_served_with_etag_304_and_gzip(client, settings):
    ids = {"rules": [{"sid": n, "raw": f"alert ip any any -> any any (sid:{n};)"}
                     for n in range(200)]}
    await store(settings, {"ids": ids, "firewall": {"entries": []}})

    response = await client.get("/rules/ids", headers={**HEADERS, "Accept-Encoding": "gzip"})
    assert response.status == 200
    assert response.headers["Content-Encoding"] == "gzip"
    assert await response.json() == ids
    etag = response.headers["ETag"]

    response = await client.get("/rules/ids", headers={**HEADERS, "If-None-Match": etag})
    assert response.status == 304
    assert response.headers["ETag"] == etag

    response = await client.get("/rules/ids", headers={**HEADERS, "If-None-Match": '"other"'})
    assert response.status == 200

    response = await client.get("/rules/ids", headers={**HEADERS, "If-None-Match": "*"})
    assert response.status == 304

    raw = await client.get("/rules/firewall", headers={**HEADERS, "Accept-Encoding": "identity"})
    assert "Content-Encoding" not in raw.headers
    assert orjson.loads(await raw.read()) == {"entries": []}


async def test_updated_at_moves_only_when_content_changes(client, settings, sql):
    await store(settings, {"ids": {"rules": [1]}, "firewall": {"entries": ["a"]}})
    first = await (await client.get("/rules/last_updated", headers=HEADERS)).json()
    stored_at = sql.value("SELECT ids_updated_at FROM router_rules")
    # ISO 8601 in UTC with a Z, as every moment the service writes
    assert first["ids_updated_at"].endswith("Z")
    assert datetime.fromisoformat(first["ids_updated_at"]) == stored_at
    assert first["firewall_updated_at"]

    await store(settings, {"ids": {"rules": [1]}, "firewall": {"entries": ["b"]}})
    second = await (await client.get("/rules/last_updated", headers=HEADERS)).json()
    assert second["ids_updated_at"] == first["ids_updated_at"]
    assert second["firewall_updated_at"] > first["firewall_updated_at"]


def test_gzip_helper_roundtrip():
    # Guards the test data helper used by the ingestion tests.
    assert gzip.decompress(gzip.compress(b"x")) == b"x"


@pytest.mark.parametrize("method, path, allowed", [
    ("GET", "/nope", None), ("GET", "/", None), ("GET", "/api", None), ("GET", "/api/nope", None),
    ("GET", "/log/events", "POST"), ("POST", "/rules/ids", "GET,HEAD"),
    ("DELETE", "/metrics", "GET,HEAD"),
    ("POST", "/api/notifications/0b6f3b0c-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "GET,HEAD")])
async def test_paths_and_methods_without_a_route_are_answered_in_json(client, method, path,
                                                                      allowed):
    """Each app's last routes (server/web/routes.py) answer what no route has, in JSON: 404,
    or 405 naming the path's methods; a sub-application's bare prefix (/api) too."""
    response = await client.request(method, path, headers=HEADERS)
    assert response.status == (405 if allowed else 404)
    assert response.headers.get("Allow") == allowed
    assert (await response.json())["error"] == ("Method Not Allowed" if allowed else "Not Found")


async def test_console_paths_without_a_route_ask_a_stranger_to_sign_in(client):
    for path in ("/console", "/console/nope"):
        response = await client.get(path, allow_redirects=False)
        assert response.status == 303
        assert response.headers["Location"].startswith("/console/sign-in")


@pytest.mark.parametrize("auth, head", [
    ("mac", b'GET /rules/ids HTTP/1.1\r\nX-ID: aa:bb:cc:00:09:01\r\nIf-None-Match: "\xff\xfe"\r\n'),
    ("mac", b'GET /rules/firewall HTTP/1.1\r\nX-ID: aa:bb:cc:00:09:01\r\n'
            b'If-None-Match: W/"\xff", "x"\r\n'),
    ("mac", b'GET /rules/fleet?delta=2 HTTP/1.1\r\nX-ID: aa:bb:cc:00:09:01\r\n'
            b'If-None-Match: "\xff\xfe"\r\n'),
    ("mac", b'GET /rules/intel?delta=1 HTTP/1.1\r\nX-ID: aa:bb:cc:00:09:01\r\n'
            b'If-None-Match: "\xff\xfe"\r\n'),
    ("mac", b'GET /rules/last_updated HTTP/1.1\r\nX-ID: aa:bb:cc:00:09:01\r\n'
            b'Router-Capacity: rules=\xff\r\n'),
    ("mac", b'GET /rules/last_updated HTTP/1.1\r\nX-ID: aa:bb:cc:00:09:\xff\r\n'),
    ("mac", b'POST /log/events HTTP/1.1\r\nX-ID: aa:bb:cc:00:09:01\r\nIdempotency-Key: \xff\r\n'
            b'Content-Type: application/x-ndjson\r\nContent-Length: 0\r\n'),
    ("mac", b'GET /metrics HTTP/1.1\r\nAuthorization: Bearer \xff\xfe\r\n'),
    ("mac", b'GET /api/notifications?user=u HTTP/1.1\r\nAuthorization: Bearer \xff\xfe\r\n'),
    ("key", b'GET /rules/last_updated HTTP/1.1\r\nX-ID: aa:bb:cc:00:09:01\r\n'
            b'Authorization: Bearer \xff\xfe\r\n'),
    ("key", b'POST /enroll HTTP/1.1\r\nX-ID: aa:bb:cc:00:09:01\r\n'
            b'Authorization: Bearer \xff\xfe\r\nContent-Length: 0\r\n'),
], ids=lambda value: value if isinstance(value, str) else value.split(b"\r\n")[-2][:40].decode(
    "ascii", "replace"))
async def test_header_bytes_that_are_not_utf8_get_a_clear_answer_never_a_500(
        make_client, database, tmp_path, auth, head):
    """aiohttp hands on bytes that are not UTF-8 as surrogates, which neither a statement nor
    a hash can take: an ETag of them matches nothing, a key or token of them is wrong."""
    client = await make_client(settings_for(
        database, tmp_path, ROUTER_AUTH=auth, ENROLLMENT_TOKEN="t" * 16,
        METRICS_TOKEN="m" * 16, NOTIFICATION_API_TOKEN="n" * 16))
    answer = await raw_request(client.server.port, head)
    status = int(answer.split(b" ", 2)[1])
    assert status in (200, 304, 400, 401, 403, 404), answer[:300]
    if status >= 400:
        assert b'"error"' in answer, answer[:300]
