"""The console (issue 35) over real HTTP on a real PostgreSQL: sign-in and its throttle, the
two roles, CSRF on every form, expired and forged sessions, the listener switches, and a
router's page showing what its router sent escaped. The browser tests are in
tests/test_console_browser.py."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections import Counter

import aiohttp
import orjson
import pytest

from server.console.auth import COOKIE, hash_secret
from testkit.database import command_env
from testkit.server import ServerRunner, free_port, http_get
from tests.commands import router_backend

SUPPORT, OPERATOR = ("sam", "s" * 20), ("olga", "o" * 20)
SECRET = "k" * 40
MAC = "aa:bb:cc:00:35:01"


# Every form that changes something, with what it would change.
FORMS = [("/console/tuning/allowlist", {"network": "192.0.2.0/24"}),
         ("/console/tuning/overrides", {"action": "disable", "selector": "2010935"}),
         ("/console/tuning/allowlist/1/remove", {}),
         ("/console/tuning/overrides/1/remove", {}),
         (f"/console/routers/{MAC}/reset", {})]


def unchanged(sql) -> bool:
    return sql.value("SELECT (SELECT count(*) FROM tuning_changes) + (SELECT count(*) FROM "
                     "firewall_allowlist) + (SELECT count(*) FROM rule_overrides) + (SELECT "
                     "count(*) FROM enrollment_windows)") == 0


def console_settings(settings, **changes):
    users = ((SUPPORT[0], "support", hash_secret(SUPPORT[1])),
             (OPERATOR[0], "operator", hash_secret(OPERATOR[1])))
    return settings.replace(console_users=users, console_secret=SECRET, **changes)


async def sign_in(client, who, secret=None):
    page = await client.get("/console/sign-in")
    token = re.search(r'name="token" value="([^"]+)"', await page.text()).group(1)
    return await client.post("/console/sign-in", data={
        "token": token, "name": who[0], "secret": secret or who[1], "next": "/console/tuning"},
        allow_redirects=False)


async def csrf_of(client, path="/console/tuning"):
    page = await client.get(path)
    assert page.status == 200, await page.text()
    return re.search(r'name="csrf" value="([^"]+)"', await page.text()).group(1)


@pytest.fixture
async def console(make_client, settings):
    client = await make_client(console_settings(settings))
    assert (await client.get("/rules/last_updated", headers={"X-ID": MAC})).status == 200
    return client


async def test_signing_in_leads_to_the_page_asked_for(console):
    first = await console.get("/console/tuning", allow_redirects=False)
    assert first.status == 303 and first.headers["Location"].startswith("/console/sign-in")
    signed = await sign_in(console, SUPPORT)
    assert signed.status == 303 and signed.headers["Location"] == "/console/tuning"
    cookie = signed.cookies[COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    page = await console.get("/console/tuning")
    assert page.status == 200 and "sam (support)" in await page.text()
    assert "script-src" not in page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]


async def test_a_wrong_secret_is_refused_and_guessing_is_throttled(make_client, settings):
    console = await make_client(console_settings(
        settings, failed_credentials_per_minute_per_address=5))
    refused = await sign_in(console, SUPPORT, "x" * 20)
    assert refused.status == 401 and "Wrong name or secret" in await refused.text()
    assert COOKIE not in refused.cookies
    assert (await sign_in(console, ("nobody", "n" * 20))).status == 401
    statuses = [(await sign_in(console, SUPPORT, f"{n:020d}")).status for n in range(12)]
    assert 429 in statuses
    throttled = await sign_in(console, SUPPORT)   # even the right secret, for now
    assert throttled.status == 429 and int(throttled.headers["Retry-After"]) >= 1


async def test_a_stale_sign_in_form_is_refused(console):
    answer = await console.post("/console/sign-in", data={
        "token": "forged", "name": SUPPORT[0], "secret": SUPPORT[1]}, allow_redirects=False)
    assert answer.status == 403 and COOKIE not in answer.cookies


async def test_every_form_refuses_a_missing_or_wrong_csrf_token(console, sql):
    await sign_in(console, OPERATOR)
    for path, data in FORMS:
        for csrf in ({}, {"csrf": "wrong"}):
            answer = await console.post(path, data={**data, **csrf}, allow_redirects=False)
            assert answer.status == 403, (path, answer.status)
            assert "CSRF" in await answer.text()
    assert unchanged(sql)


async def test_support_reads_but_cannot_change(console, sql):
    await sign_in(console, SUPPORT)
    csrf = await csrf_of(console)
    page = await (await console.get("/console/tuning")).text()
    assert "Add to the allowlist" not in page
    for path, data in FORMS:
        answer = await console.post(path, data={**data, "csrf": csrf}, allow_redirects=False)
        assert answer.status == 403 and "support" in await answer.text(), path
    assert unchanged(sql)


async def test_an_operator_change_is_stored_and_recorded(console, sql):
    await sign_in(console, OPERATOR)
    csrf = await csrf_of(console)
    answer = await console.post("/console/tuning/allowlist", data={
        "csrf": csrf, "network": "198.51.100.7", "mac": MAC, "note": "the bank",
        "back": f"/console/routers/{MAC}"}, allow_redirects=False)
    assert answer.status == 303 and answer.headers["Location"] == f"/console/routers/{MAC}"
    assert sql.rows("SELECT network::text, mac::text, note FROM firewall_allowlist") == [
        ("198.51.100.7/32", MAC, "the bank")]
    assert sql.rows("SELECT made_by, action, mac::text FROM tuning_changes") == [
        ("console:olga", "allowlist entry added", MAC)]
    page = await (await console.get(f"/console/routers/{MAC}")).text()
    assert "198.51.100.7/32" in page and "console:olga" in page
    refused = await console.post("/console/tuning/allowlist", data={
        "csrf": csrf, "network": "not-a-network"}, allow_redirects=False)
    assert refused.status == 400 and "not an address or network" in await refused.text()
    assert sql.value("SELECT count(*) FROM firewall_allowlist") == 1


def session_cookie(client) -> str:
    return client.session.cookie_jar.filter_cookies(client.make_url("/console/"))[COOKIE].value


async def refused_everywhere(client, csrf: str) -> None:
    """A page sends the browser to sign in; every form is refused, nothing changed."""
    page = await client.get("/console/tuning", allow_redirects=False)
    assert page.status == 303 and "/console/sign-in" in page.headers["Location"]
    for path, data in FORMS:
        answer = await client.post(path, data={**data, "csrf": csrf}, allow_redirects=False)
        assert answer.status == 401 and "sign in again" in await answer.text(), path


async def test_an_expired_or_forged_session_is_refused(console, sql):
    await sign_in(console, OPERATOR)
    csrf = await csrf_of(console)
    sql.rows("UPDATE console_sessions SET expires_at = now() - interval '1 second'")
    await refused_everywhere(console, csrf)
    console.session.cookie_jar.update_cookies({COOKIE: "f" * 43})
    await refused_everywhere(console, csrf)
    assert unchanged(sql)


async def test_the_cookie_holds_nothing_readable(console, sql):
    """Issue 44: an opaque random id (before: base64 JSON of the name, the credential's
    fingerprint and the CSRF token); the database keeps only its keyed hash."""
    await sign_in(console, OPERATOR)
    cookie = session_cookie(console)
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", cookie)
    csrf = await csrf_of(console)
    assert csrf not in cookie and OPERATOR[0] not in cookie
    stored = sql.rows("SELECT id_hash, name, address FROM console_sessions")
    assert len(stored) == 1 and stored[0][1:] == (OPERATOR[0], "127.0.0.1")
    assert cookie.encode() not in bytes(stored[0][0])


async def test_signing_out_ends_the_session_for_a_replayed_cookie(console, sql):
    """Issue 44: after sign-out, the old cookie replayed opened the tuning page and added an
    allowlist entry."""
    await sign_in(console, OPERATOR)
    csrf, cookie = await csrf_of(console), session_cookie(console)
    out = await console.post("/console/sign-out", data={"csrf": csrf}, allow_redirects=False)
    assert out.status == 303
    console.session.cookie_jar.update_cookies({COOKIE: cookie})
    await refused_everywhere(console, csrf)
    assert unchanged(sql) and sql.value("SELECT count(*) FROM console_sessions") == 0


async def test_sessions_listed_and_ended_by_the_command_and_by_leaving_console_users(
        make_client, settings, sql):
    first = await make_client(console_settings(settings))
    second = await make_client(console_settings(settings))
    await sign_in(first, OPERATOR)
    await sign_in(second, SUPPORT)
    csrf = await csrf_of(first)
    listed = console_command(settings, "sessions")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()[1:]]
    assert sorted(row[0] for row in rows) == [OPERATOR[0], SUPPORT[0]]
    assert all(row[3] == "127.0.0.1" for row in rows)
    ended = console_command(settings, "sessions", "end", OPERATOR[0])
    assert ended.returncode == 0 and ended.stdout.strip() == f"1 session of {OPERATOR[0]} ended"
    await refused_everywhere(first, csrf)
    assert (await second.get("/console/tuning")).status == 200
    # The support user taken out of CONSOLE_USERS: refused at once, by a process started so.
    users = tuple(u for u in console_settings(settings).console_users if u[0] != SUPPORT[0])
    without = await make_client(console_settings(settings).replace(console_users=users))
    without.session.cookie_jar.update_cookies({COOKIE: session_cookie(second)})
    assert (await without.get("/console/tuning", allow_redirects=False)).status == 303
    assert unchanged(sql)


def console_command(settings, *args: str) -> subprocess.CompletedProcess:
    return router_backend(command_env(settings), "console", *args)


async def test_redirects_stay_on_the_console(console):
    page = await console.get("/console/sign-in?next=//evil.example/x")
    assert 'name="next" value="/console/"' in await page.text()


async def test_the_console_can_be_off_or_on_a_listener_of_its_own(make_client, settings):
    off = await make_client(console_settings(settings, console=False))
    assert (await off.get("/console/sign-in")).status == 404
    elsewhere = await make_client(console_settings(settings, console_listen=("127.0.0.1", 9)))
    answer = await elsewhere.get("/console/sign-in")
    assert answer.status == 404
    assert (await elsewhere.get("/health", headers={"X-ID": MAC})).status == 200


async def test_what_a_router_sent_is_shown_escaped(console):
    hostile = "<script>alert(1)</script>"
    record = {"timestamp": "2026-11-24T10:00:00+0000", "event_type": "alert",
              "src_ip": "203.0.113.9", "src_port": 1, "dest_ip": "192.168.1.2", "dest_port": 80,
              "proto": "TCP", "alert": {"signature_id": 9000001, "severity": 2,
                                        "signature": hostile},
              "http": {"http_user_agent": f"\"><img src=x onerror=alert(2)>{hostile}"}}
    upload = await console.post("/log/events", data=orjson.dumps(record), headers={
        "X-ID": MAC, "Content-Type": "application/x-ndjson"})
    assert upload.status == 200, await upload.text()
    await sign_in(console, SUPPORT)
    page = await console.get(f"/console/routers/{MAC.upper().replace(':', '-')}")
    text = await page.text()
    assert page.status == 200, text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<script>" not in text and "<img" not in text


async def test_what_the_database_would_refuse_is_refused_first(console, sql):
    await sign_in(console, OPERATOR)
    csrf = await csrf_of(console)
    for path, data in (("/console/tuning/allowlist", {"network": "192.0.2.1", "note": "a\x00b"}),
                       ("/console/tuning/allowlist", {"network": "192.0.2.1\x00"}),
                       ("/console/tuning/overrides", {"action": "disable",
                                                      "selector": "re:a\x00"}),
                       ("/console/tuning/allowlist", {"network": "192.0.2.1",
                                                      "mac": "aa:bb:cc:dd:ee:ff"}),
                       ("/console/routers/zz/reset", {})):
        answer = await console.post(path, data={**data, "csrf": csrf}, allow_redirects=False)
        assert answer.status in (400, 404), (path, answer.status)
        assert "text/html" in answer.headers["Content-Type"]
    # A file where a field's text belongs is no token.
    form = aiohttp.FormData({"network": "192.0.2.1"})
    form.add_field("csrf", csrf.encode(), filename="csrf.txt")
    answer = await console.post("/console/tuning/allowlist", data=form, allow_redirects=False)
    assert answer.status == 403
    assert unchanged(sql)


def test_the_console_listener_is_matched_by_address_and_port(tmp_path):
    """LISTEN_HOST on every address and CONSOLE_LISTEN on loopback, one port: the console
    answers on 127.0.0.1 only, not on another address of the host (127.0.0.2 stands for the
    public one), where the routers' API still answers."""
    port = free_port()
    server = ServerRunner(None, tmp_path, HTTP_WORKERS="2", LISTEN_HOST="0.0.0.0",
                          LISTEN_PORT=str(port), CONSOLE_LISTEN=f"127.0.0.1:{port}",
                          ROUTER_AUTH="mac", SERVICES="router")
    server.port = port
    server.start(timeout=120)
    try:
        def status(address: str, path: str) -> int:
            return http_get(f"http://{address}:{port}{path}", **{"X-ID": "aa:bb:cc:00:44:01"})[0]
        assert status("127.0.0.1", "/console/sign-in") == 200
        assert status("127.0.0.2", "/console/sign-in") == 404
        assert status("127.0.0.2", "/health") == 200
    finally:
        server.stop()


async def test_concurrent_wrong_secrets_are_checked_no_more_than_the_allowance(make_client,
                                                                               settings):
    """Issue 44: 100 wrong secrets sent together from one address: 10 are checked (401),
    90 get 429 before any hashing; before, all 100 were checked."""
    console = await make_client(console_settings(
        settings, failed_credentials_per_minute_per_address=10))
    page = await console.get("/console/sign-in")
    token = re.search(r'name="token" value="([^"]+)"', await page.text()).group(1)

    async def guess(n: int) -> int:
        async with console.post("/console/sign-in", data={
                "token": token, "name": SUPPORT[0], "secret": f"{n:020d}"},
                allow_redirects=False) as answer:
            return answer.status
    statuses = Counter(await asyncio.gather(*(guess(n) for n in range(100))))
    assert statuses == {401: 10, 429: 90}, statuses
