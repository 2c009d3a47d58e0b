"""Connections that answer polls 304 as their head is parsed (server/polling/connection.py),
over raw sockets: the answers keep the order of the requests, whatever else is pipelined or in
progress; keep-alive works as before; and what the fast path must not answer goes to the
application."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from server.web.app import create_app
from testkit.database import settings_for
from testkit.server import ServiceTestServer
from tests.test_not_modified import MAC, answered_304, fast_answers, stored_and_cached


def poll(etag: str, extra: str = "", version: str = "1.1") -> bytes:
    return (f"GET /rules/ids HTTP/{version}\r\nHost: t\r\nX-ID: {MAC}\r\n"
            f"If-None-Match: {etag}\r\n{extra}\r\n").encode()


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\nX-ID: {MAC}\r\n\r\n".encode()


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: status, headers (lower-case names), body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status_line, *lines = head.decode().split("\r\n")[:-2]
    headers = {name.lower(): value for name, _, value in
               (line.partition(": ") for line in lines)}
    length = int(headers.get("content-length", 0))
    body = await asyncio.wait_for(reader.readexactly(length), 10) if length else b""
    return int(status_line.split()[1]), headers, body


async def connect(client):
    return await asyncio.open_connection(client.server.host, client.server.port)


def requests_through_the_app(client) -> int:
    """Requests aiohttp's request loop handled (the fast path's answers are not among them)."""
    return client.server.runner.server.requests_count


async def prepared(make_client, settings):
    client = await make_client(settings)
    client.extra_headers = {}
    return client, await stored_and_cached(client, settings)


async def test_polls_on_an_idle_connection_are_answered_without_the_app(make_client, settings,
                                                                        access_lines):
    client, etag = await prepared(make_client, settings)
    through_app, counted = requests_through_the_app(client), answered_304(client)
    reader, writer = await connect(client)
    for _ in range(5):
        writer.write(poll(etag))
        status, headers, body = await read_answer(reader)
        assert (status, headers["etag"], body) == (304, etag, b"")
        assert "date" in headers and "server" in headers
    writer.close()
    assert requests_through_the_app(client) == through_app
    assert answered_304(client) == counted + 5
    await asyncio.sleep(0.05)  # access lines are written an iteration or two after the answer
    logged = [line for line in access_lines() if '" 304 0 ' in line]
    assert len(logged) == 5 and '"GET /rules/ids HTTP/1.1" 304 0' in logged[0]
    assert logged[0].endswith(f's "{MAC}"') and " 127.0.0.1 " in logged[0]


async def test_pipelined_requests_are_answered_in_order(make_client, settings):
    client, etag = await prepared(make_client, settings)
    reader, writer = await connect(client)
    writer.write(poll(etag) + get("/rules/last_updated") + poll(etag) + poll('"old"')
                 + poll(etag))
    answers = [await read_answer(reader) for _ in range(5)]
    assert [status for status, _, _ in answers] == [304, 200, 304, 200, 304]
    assert answers[1][2].startswith(b"{")  # last_updated's JSON
    assert answers[3][2]  # the payload, for the ETag it did not know
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")  # after fast answers, on the same connection
    status, headers, body = await read_answer(reader)
    assert status == 400
    writer.close()


async def test_a_poll_behind_a_request_in_progress_waits_its_turn(make_client, settings):
    client, etag = await prepared(make_client, settings)
    reader, writer = await connect(client)
    record = b'{"timestamp": "2026-11-23T08:00:00Z", "event_type": "alert"}\n'
    writer.write(f"POST /log/events HTTP/1.1\r\nHost: t\r\nX-ID: {MAC}\r\n"
                 f"Content-Type: application/x-ndjson\r\n"
                 f"Content-Length: {len(record)}\r\n\r\n".encode() + record[:10])
    await asyncio.sleep(0.2)  # the upload is in progress, its body half sent
    writer.write(record[10:] + poll(etag))
    status, _, body = await read_answer(reader)
    assert status == 200 and b'"accepted":1' in body
    assert (await read_answer(reader))[0] == 304
    writer.close()


async def test_what_the_fast_path_must_not_answer_goes_to_the_app(make_client, settings):
    client, etag = await prepared(make_client, settings)
    through_app = requests_through_the_app(client)
    reader, writer = await connect(client)
    writer.write(poll(etag, "Content-Length: 3\r\n") + b"abc")  # a body
    assert (await read_answer(reader))[0] == 304
    writer.write(poll(etag).replace(b"/rules/ids", b"/rules/ids?x=1"))
    assert (await read_answer(reader))[0] == 304
    writer.write(poll(etag, "Connection: close\r\n"))
    status, headers, _ = await read_answer(reader)
    assert status == 304 and await reader.read() == b""  # closed after the answer
    writer.close()
    reader, writer = await connect(client)
    writer.write(poll(etag, version="1.0"))
    status, _, _ = await read_answer(reader)
    assert status == 304
    writer.close()
    assert requests_through_the_app(client) == through_app + 4


async def test_keep_alive_holds_while_polls_arrive_and_ends_when_they_stop(
        aiohttp_client, database, tmp_path):
    settings = settings_for(database, tmp_path)
    server = ServiceTestServer(create_app(settings))
    await server.start_server(keepalive_timeout=1)
    client = await aiohttp_client(server)
    client.extra_headers = {}
    etag = await stored_and_cached(client, settings)
    reader, writer = await connect(client)
    for _ in range(8):  # 2.4 s of polls on one connection, beyond the 1 s timeout
        writer.write(poll(etag))
        assert (await read_answer(reader))[0] == 304
        await asyncio.sleep(0.3)
    assert await asyncio.wait_for(reader.read(), 3) == b""  # idle: closed
    writer.close()


async def test_no_answer_is_written_while_the_client_is_not_reading(make_client, settings):
    """Once the socket's send buffer is full (asyncio pauses writing), polls are left to the
    request loop, which waits for the client to read as it does for any response, instead
    of piling answers up in memory for a client that reads nothing."""
    client, etag = await prepared(make_client, settings)
    reader, writer = await connect(client)
    connection = await server_side(client, writer.get_extra_info("sockname")[1])
    connection.pause_writing()  # what the transport does when the client stops reading
    for _ in range(3):
        writer.write(poll(etag))
        await asyncio.sleep(0.2)
    # aiohttp's request loop writes the first answer and waits for the client to read
    assert (await read_answer(reader))[0] == 304
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 0.5)
    connection.resume_writing()
    assert [(await read_answer(reader))[0] for _ in range(2)] == [304, 304]
    writer.write(poll(etag))  # reading again: answered as the head is parsed
    assert (await read_answer(reader))[0] == 304
    writer.close()


async def server_side(client, client_port: int):
    """The server's connection object for the client's socket."""
    for _ in range(100):
        for connection in client.server.runner.server.connections:
            peer = connection.transport.get_extra_info("peername") if connection.transport \
                else None
            if peer and peer[1] == client_port:
                return connection
        await asyncio.sleep(0.02)
    raise AssertionError("the server never saw the connection")


# The behaviours of aiohttp's connection handling that server/polling/connection.py relies on
# (issue 26): a change in aiohttp that breaks one fails here, not in production.

async def test_150_pipelined_polls_mixed_with_requests_keep_their_order(make_client, settings):
    client, etag = await prepared(make_client, settings)
    through_app, fast = requests_through_the_app(client), fast_answers(client)
    reader, writer = await connect(client)
    sent = []
    for number in range(150):
        if number % 10 == 9:
            sent.append(200)
            writer.write(get("/rules/last_updated"))
        else:
            sent.append(304)
            writer.write(poll(etag))
    answers = [(await read_answer(reader))[0] for _ in sent]
    assert answers == sent
    writer.write(poll(etag))  # the connection is still good
    assert (await read_answer(reader))[0] == 304
    writer.close()
    assert fast_answers(client) > fast  # the fast path answered some of them
    assert requests_through_the_app(client) - through_app >= 15  # and the app the rest


async def test_a_fast_304_has_the_headers_of_the_apps_304(make_client, database, tmp_path):
    """Same header names, same values (but the date), whichever answers."""
    settings = settings_for(database, tmp_path)
    client, etag = await prepared(make_client, settings)
    reader, writer = await connect(client)
    writer.write(poll(etag))
    fast_status, fast, _ = await read_answer(reader)
    writer.close()
    plain = await make_client(settings.replace(http_fast_not_modified=False))
    plain.extra_headers = {}
    etag_again = await stored_and_cached(plain, settings)
    reader, writer = await connect(plain)
    writer.write(poll(etag_again))
    app_status, through_app, _ = await read_answer(reader)
    writer.close()
    assert fast_status == app_status == 304
    assert set(fast) == set(through_app), (fast, through_app)
    assert {name: value for name, value in fast.items() if name != "date"} == \
        {name: value for name, value in through_app.items() if name != "date"}


async def test_the_fast_path_steps_aside_when_the_app_adds_headers_to_responses(
        aiohttp_client, database, tmp_path):
    """A header added by an on_response_prepare handler would be missing from a 304 the
    fast path wrote: with such a handler, every poll goes to the application."""
    settings = settings_for(database, tmp_path)
    app = create_app(settings)

    async def stamp(request, response):
        response.headers["X-Fleet"] = "test"
    app.on_response_prepare.append(stamp)
    client = await aiohttp_client(ServiceTestServer(app))
    client.extra_headers = {}
    etag = await stored_and_cached(client, settings)
    through_app = requests_through_the_app(client)
    reader, writer = await connect(client)
    writer.write(poll(etag) + poll(etag))
    answers = [await read_answer(reader) for _ in range(2)]
    writer.close()
    assert [(status, headers.get("x-fleet")) for status, headers, _ in answers] == \
        [(304, "test"), (304, "test")]
    assert requests_through_the_app(client) == through_app + 2


# aiohttp modules the service may import anywhere: its documented API. The parser's exception
# class is used by the access log's filter of refused heads (server/web/access_log.py).
PUBLIC_AIOHTTP = {"aiohttp", "aiohttp.web", "aiohttp.abc", "aiohttp.test_utils",
                  "aiohttp.http_exceptions"}
SEAM = Path("server/polling/connection.py")


def test_aiohttp_internals_are_used_in_one_module_only():
    root = Path(__file__).resolve().parents[1]
    private = []
    for path in sorted((root / "server").rglob("*.py")) + sorted((root / "testkit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            private += [(str(path.relative_to(root)), name) for name in names
                        if name.split(".")[0] == "aiohttp" and name not in PUBLIC_AIOHTTP]
    assert {path for path, _ in private} == {str(SEAM)}, private
