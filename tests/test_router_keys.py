"""Router trust (issue 12), ROUTER_AUTH=key: every router endpoint needs the router's own key;
keys come from operators or from enrollment with the fleet's token. Every refusal stores and
registers nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from testkit.database import command_env, settings_for
from testkit.server import ServerRunner, http_get
from testkit.telemetry import stored_count
from tests.commands import router_backend

VICTIM, ATTACKER = "aa:bb:cc:00:12:01", "aa:bb:cc:00:12:02"
TOKEN = "fleet-enrollment-secret-0123"
ALERT = (b'{"event_type": "alert", "src_ip": "8.8.8.8", "dest_ip": "192.168.1.2", '
         b'"alert": {"signature_id": 2010935, "severity": 1}}\n')
ENDPOINTS = [("GET", "/rules/last_updated"), ("GET", "/rules/ids"), ("GET", "/rules/firewall"),
             ("POST", "/log/events"), ("POST", "/log/cfm")]


@pytest.fixture
def key_settings(database, tmp_path):
    return settings_for(database, tmp_path, ROUTER_AUTH="key", ENROLLMENT_TOKEN=TOKEN,
                        ROUTER_CACHE_SECONDS="0")


def command(settings, *args: str) -> subprocess.CompletedProcess:
    return router_backend(command_env(settings), "subscriptions", *args)


def issued_key(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


async def call(client, method: str, path: str, mac: str, key: str | None = None,
               body: bytes = ALERT) -> int:
    headers = {"X-ID": mac, "Content-Type": "application/x-ndjson"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    response = await client.request(method, path, headers=headers,
                                    data=body if method == "POST" else None)
    assert "error" in await response.json() if response.status >= 400 else True
    return response.status


async def enroll(client, mac: str, token: str = TOKEN):
    response = await client.post("/enroll", headers={"X-ID": mac,
                                                     "Authorization": f"Bearer {token}"})
    return response.status, await response.json()


def stored(sql) -> tuple[int, int, int]:
    return (stored_count(sql),
            stored_count(sql, "cfm"),
            sql.value("SELECT count(*) FROM activations"))


async def test_no_wrong_or_another_routers_key_is_401(key_settings, make_client, sql):
    client = await make_client(key_settings)
    victim_key = issued_key(command(key_settings, "add", VICTIM))
    status, reply = await enroll(client, ATTACKER)
    attacker_key = reply["key"]
    assert status == 201 and attacker_key != victim_key and len(attacker_key) >= 43
    unknown = "aa:bb:cc:00:12:99"
    for method, path in ENDPOINTS:
        for mac, key in ((VICTIM, None), (VICTIM, "not-the-key"), (VICTIM, attacker_key),
                         (unknown, attacker_key), (VICTIM, f"{victim_key}x")):
            assert await call(client, method, path, mac, key) == 401, (method, path, mac, key)
    assert stored(sql) == (0, 0, 0)
    assert sql.value("SELECT count(*) FROM routers WHERE mac = %s", (unknown,)) == 0
    # The victim's own key works; /health needs none (probes carry no key).
    assert await call(client, "POST", "/log/events", VICTIM, victim_key) == 200
    assert await call(client, "GET", "/rules/last_updated", VICTIM, victim_key) == 200
    assert (await client.get("/health", headers={"X-ID": VICTIM})).status == 200
    assert stored(sql) == (1, 0, 1)
    metrics = await (await client.get("/metrics")).text()
    assert 'router_auth_events_total{event="key_refused"} 25.0' in metrics
    assert 'router_auth_events_total{event="enrolled"} 1.0' in metrics


async def test_spoofed_alerts_for_another_router_are_refused(key_settings, make_client, sql):
    """The poisoning attempt: alerts posted for the victim's MAC with 8.8.8.8 as source."""
    client = await make_client(key_settings)
    issued_key(command(key_settings, "add", VICTIM))
    await enroll(client, ATTACKER)
    for key in (None, "guess", (await enroll(client, "aa:bb:cc:00:12:03"))[1]["key"]):
        assert await call(client, "POST", "/log/events", VICTIM, key, ALERT * 50) == 401
    assert stored_count(sql, mac=VICTIM) == 0


async def test_revoked_and_rotated_keys(key_settings, make_client, sql):
    client = await make_client(key_settings)
    first = issued_key(command(key_settings, "add", VICTIM))
    assert await call(client, "GET", "/rules/last_updated", VICTIM, first) == 200
    second = issued_key(command(key_settings, "rotate-key", VICTIM))
    assert second != first
    assert await call(client, "GET", "/rules/last_updated", VICTIM, first) == 401
    assert await call(client, "GET", "/rules/last_updated", VICTIM, second) == 200
    assert command(key_settings, "remove", VICTIM).returncode == 0
    assert await call(client, "GET", "/rules/last_updated", VICTIM, second) == 401
    assert sql.value("SELECT count(*) FROM router_keys") == 0
    missing = command(key_settings, "rotate-key", VICTIM)
    assert missing.returncode == 1 and "no key to rotate" in missing.stderr


async def test_enrollment_once_then_reset_then_again(key_settings, make_client, sql):
    client = await make_client(key_settings)
    status, reply = await enroll(client, VICTIM)
    assert status == 201
    first = reply["key"]
    assert sql.value("SELECT count(*) FROM generation_queue WHERE mac = %s", (VICTIM,)) == 1
    status, reply = await enroll(client, VICTIM)  # a factory-reset router, or someone else
    assert status == 409 and "subscriptions reset" in reply["error"]
    assert await call(client, "GET", "/rules/last_updated", VICTIM, first) == 200
    reset = command(key_settings, "reset", VICTIM)
    assert reset.returncode == 0 and "may enroll within the next 60 minutes" in reset.stdout
    assert await call(client, "GET", "/rules/last_updated", VICTIM, first) == 401
    status, reply = await enroll(client, VICTIM)
    assert status == 201 and reply["key"] != first
    assert await call(client, "GET", "/rules/last_updated", VICTIM, reply["key"]) == 200
    assert sql.value("SELECT count(*) FROM routers") == 1  # no duplicate router
    assert sql.rows("SELECT issued_by FROM router_keys") == [("enrollment",)]
    assert command(key_settings, "reset", "aa:bb:cc:00:12:77").returncode == 1
    metrics = await (await client.get("/metrics")).text()
    assert 'router_auth_events_total{event="enroll_conflict"} 1.0' in metrics


async def test_a_reset_opens_enrollment_for_a_while_only(key_settings, make_client, sql):
    """Issue 27, finding 7: after a reset, whoever held the fleet token could enroll the MAC
    at any later time, and the real router then got 409."""
    client = await make_client(key_settings)
    assert (await enroll(client, VICTIM))[0] == 201
    assert command(key_settings, "reset", VICTIM).returncode == 0
    assert sql.value("SELECT open_until - now() > interval '59 minutes' FROM "
                     "enrollment_windows WHERE mac = %s", (VICTIM,))
    sql.rows("UPDATE enrollment_windows SET open_until = now() - interval '1 second'")
    status, reply = await enroll(client, VICTIM)  # the attacker, after the window
    assert status == 409 and "reset window has passed" in reply["error"]
    assert sql.value("SELECT count(*) FROM router_keys") == 0
    assert command(key_settings, "reset", VICTIM).returncode == 0  # the operator opens it
    status, reply = await enroll(client, VICTIM)
    assert status == 201
    assert sql.value("SELECT count(*) FROM enrollment_windows") == 0  # used up
    assert (await enroll(client, VICTIM))[0] == 409


async def test_bad_enrollment_token_is_401_and_stores_nothing(key_settings, make_client, sql):
    client = await make_client(key_settings)
    for token in ("wrong-token-wrong-token", "", TOKEN + "x"):
        status, reply = await enroll(client, VICTIM, token)
        assert status == 401 and "enrollment token" in reply["error"]
    no_header = await client.post("/enroll", headers={"X-ID": VICTIM})
    assert no_header.status == 401
    assert sql.value("SELECT count(*) FROM routers") == 0
    assert sql.value("SELECT count(*) FROM router_keys") == 0


async def test_enrollment_off_and_closed_registration(database, tmp_path, make_client, sql):
    off = await make_client(settings_for(database, tmp_path, ROUTER_AUTH="key"))
    status, reply = await enroll(off, VICTIM)
    assert status == 403 and "enrollment is off" in reply["error"]
    closed_settings = settings_for(database, tmp_path, ROUTER_AUTH="key",
                                   ENROLLMENT_TOKEN=TOKEN, REGISTRATION_MODE="closed")
    closed = await make_client(closed_settings)
    status, reply = await enroll(closed, VICTIM)
    assert status == 403 and "not subscribed" in reply["error"]
    assert sql.value("SELECT count(*) FROM routers") == 0
    # Subscribed (in mac mode, so no key was printed): it may enroll.
    assert command(settings_for(database, tmp_path, REGISTRATION_MODE="closed"),
                   "add", VICTIM).returncode == 0
    assert (await enroll(closed, VICTIM))[0] == 201


async def test_add_prints_a_key_only_in_key_mode(key_settings, database, tmp_path):
    plain = command(settings_for(database, tmp_path), "add", VICTIM)
    assert plain.returncode == 0 and "key" not in plain.stdout
    keyed = command(key_settings, "add", VICTIM)  # registered already: it gets its first key
    assert keyed.returncode == 0 and "shown once" in keyed.stdout
    again = command(key_settings, "add", VICTIM)
    assert again.returncode == 0 and "has a key already" in again.stdout


def test_short_enrollment_token_stops_start_up(database, tmp_path):
    result = subprocess.run([sys.executable, "-m", "ops.cli", "subscriptions", "list"],
                            env=command_env(settings_for(database, tmp_path),
                                            ENROLLMENT_TOKEN="short"),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "ENROLLMENT_TOKEN" in result.stderr


def test_key_changes_reach_every_worker_at_once(database, tmp_path):
    """Issue 44: two HTTP workers that trust a router's key (ROUTER_CACHE_SECONDS at its
    default, 30); `rotate-key`, then `reset`, then `remove`: within a second of each, the
    old key gets 401 from both workers (before: 200 for up to 30 s)."""
    server = ServerRunner(database, tmp_path, HTTP_WORKERS="2", ROUTER_AUTH="key",
                          ENROLLMENT_TOKEN=TOKEN, RULE_GENERATION_ENABLED="false")
    server.start(timeout=120)
    settings = settings_for(database, tmp_path, ROUTER_AUTH="key")

    def statuses(key: str, polls: int = 16) -> set[int]:
        """Each poll on a connection of its own: the kernel spreads them over the workers."""
        return {http_get(f"{server.url}/rules/last_updated", **{
            "X-ID": VICTIM, "Authorization": f"Bearer {key}", "Connection": "close"})[0]
            for _ in range(polls)}

    def within_a_second(key: str) -> set[int]:
        time.sleep(1)
        return statuses(key)

    try:
        first = issued_key(command(settings, "add", VICTIM))
        assert statuses(first) == {200}   # both workers now trust it
        second = issued_key(command(settings, "rotate-key", VICTIM))
        assert within_a_second(first) == {401}
        assert statuses(second) == {200}
        assert command(settings, "reset", VICTIM).returncode == 0
        assert within_a_second(second) == {401}
        enrolled = urllib.request.Request(f"{server.url}/enroll", method="POST", headers={
            "X-ID": VICTIM, "Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(enrolled, timeout=10) as answer:
            third = json.loads(answer.read())["key"]
        assert statuses(third) == {200}
        assert command(settings, "remove", VICTIM).returncode == 0
        assert within_a_second(third) == {401}
    finally:
        server.stop()
