"""Flood limits (issue 12): per-router requests and records, per-address registrations.
Past a limit: 429 with Retry-After and the JSON error, nothing of that request stored, and
other routers unaffected."""

from __future__ import annotations

import subprocess
import sys

from testkit.database import command_env, settings_for

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
    assert sql.value("SELECT count(*) FROM ids_events") == 0
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
    assert sql.value("SELECT count(*) FROM ids_events WHERE mac = %s", (FLOODER,)) == 80
    assert sql.value("SELECT count(*) FROM ids_events WHERE mac = %s", (OTHER,)) == 100


async def test_new_registrations_per_client_address(make_client, database, tmp_path, sql):
    settings = settings_for(database, tmp_path, REGISTRATIONS_PER_MINUTE_PER_ADDRESS="3")
    subprocess.run([sys.executable, "-m", "ops.cli", "subscriptions", "add", OTHER],
                   env=command_env(settings), check=True, capture_output=True, timeout=60)
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
    client = await make_client(settings_for(database, tmp_path, TRUSTED_PROXIES="",
                                            REGISTRATIONS_PER_MINUTE_PER_ADDRESS="2"))
    statuses = [await poll(client, f"aa:bb:cc:00:1d:{n:02x}",
                           **{"X-Forwarded-For": f"198.51.100.{n}"}) for n in range(3)]
    assert statuses == [200, 200, 429]  # all from 127.0.0.1, whatever the header says


async def test_nobody_spends_another_routers_budget_in_key_mode(make_client, database,
                                                                tmp_path):
    settings = settings_for(database, tmp_path, ROUTER_AUTH="key", ROUTER_REQUESTS_PER_MINUTE="3")
    added = subprocess.run([sys.executable, "-m", "ops.cli", "subscriptions", "add", FLOODER],
                           env=command_env(settings), capture_output=True, text=True,
                           timeout=60)
    key = added.stdout.strip().splitlines()[-1]
    client = await make_client(settings)
    for _ in range(10):
        assert await poll(client, FLOODER, Authorization="Bearer wrong") == 401
    assert [await poll(client, FLOODER, Authorization=f"Bearer {key}")
            for _ in range(4)] == [200, 200, 200, 429]
