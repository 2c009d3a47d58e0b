"""Firewall safety rails (issue 12) end to end: telemetry over HTTP, `rulegen`, the stored
payload. A spoofed alert, an allowlisted address or the router's own address never ends up
blocked; enough evidence does, with an expiry."""

from __future__ import annotations

import ipaddress
import subprocess
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from engine.addresses import carried, is_public as is_external
from engine.firewall import Exemptions
from server.jobs.preprocess import run_preprocess
from testkit.database import command_env
from testkit.payloads import unpack
from testkit.rule_archives import ruleset_settings
from tests.commands import router_backend, run_program

VICTIM = "aa:bb:cc:00:12:31"


def alerts(source: str, sids: list[int], flow: int = 1) -> bytes:
    return b"\n".join(orjson.dumps({
        "timestamp": "2026-03-02T10:00:00+00:00", "event_type": "alert", "flow_id": flow + n,
        "src_ip": source, "src_port": 40000 + n, "dest_ip": "192.168.1.2", "dest_port": 22,
        "proto": "TCP", "alert": {"signature_id": sid, "severity": 1}})
        for n, sid in enumerate(sids))


@pytest.fixture
async def fleet(database, tmp_path, make_client):
    settings = ruleset_settings("fixture", database, tmp_path)
    await run_preprocess(settings)
    return settings, await make_client(settings)


async def post(client, body: bytes, **headers: str) -> None:
    response = await client.post("/log/events", data=body, headers={
        "X-ID": VICTIM, "Content-Type": "application/x-ndjson", **headers})
    assert response.status == 200 and (await response.json())["rejected"] == 0


def command(settings, *args: str) -> subprocess.CompletedProcess:
    return router_backend(command_env(settings), *args)


def firewall(settings, sql) -> dict:
    result = run_program("ops.rulegen", command_env(settings), "--mac", VICTIM)
    assert result.returncode == 0, result.stderr
    packed = sql.value("SELECT firewall_payload_gz FROM router_rules WHERE mac = %s", (VICTIM,))
    return {entry["address"]: entry for entry in unpack(bytes(packed))["entries"]}


async def test_one_spoofed_alert_blocks_nothing_and_evidence_does(fleet, sql):
    settings, client = fleet
    await post(client, alerts("8.8.8.8", [9000001]))  # 8.8.8.8 "attacked" once
    assert "8.8.8.8" not in firewall(settings, sql)
    await post(client, alerts("1.1.1.1", [9000001, 9000003, 9000003]))
    entry = firewall(settings, sql)["1.1.1.1"]
    assert entry["reasons"] == ["alert"]
    assert sorted(a["sid"] for a in entry["alerts"]) == [9000001, 9000003]
    expires = datetime.fromisoformat(entry["expires_at"].replace("Z", "+00:00"))
    week = datetime.now(timezone.utc) + timedelta(days=7)
    assert abs((expires - week).total_seconds()) < 120  # last alert + the telemetry window


async def test_allowlisted_addresses_are_never_blocked(fleet, sql):
    settings, client = fleet
    await post(client, alerts("1.1.1.1", [9000001, 9000003, 9000003]))
    await post(client, alerts("9.9.9.9", [9000001, 9000003, 9000003], flow=100))
    assert {"1.1.1.1", "9.9.9.9", "185.220.101.1"} <= set(firewall(settings, sql))
    added = command(settings, "allowlist", "add", "1.1.1.0/24", "--note", "resolver")
    assert added.returncode == 0 and "routers made due for generation now" in added.stdout
    assert sql.value("SELECT next_due_at <= now() FROM generation_queue WHERE mac = %s",
                     (VICTIM,))
    mine = command(settings, "allowlist", "add", "185.220.101.1", "--mac", VICTIM)
    assert mine.returncode == 0
    entries = firewall(settings, sql)
    assert "1.1.1.1" not in entries and "185.220.101.1" not in entries  # alert and list
    assert "9.9.9.9" in entries
    listed = command(settings, "allowlist", "list").stdout.splitlines()
    assert listed[1].split("\t")[1:3] == ["1.1.1.0/24", "fleet"]
    assert listed[2].split("\t")[1:3] == ["185.220.101.1/32", VICTIM]
    again = command(settings, "allowlist", "add", "1.1.1.0/24")
    assert again.returncode == 0 and "already" in again.stdout
    assert command(settings, "allowlist", "remove", listed[1].split("\t")[0]).returncode == 0
    assert "1.1.1.1" in firewall(settings, sql)
    for bad in (["add", "not-a-network"], ["add", "1.2.3.4", "--mac", "aa:bb:cc:00:12:99"],
                ["remove", "999"]):
        result = command(settings, "allowlist", *bad)
        # a bad argument exits 2 (issue 54), a refusal (no such router or entry) 1
        assert result.returncode == (2 if bad[1] == "not-a-network" else 1) and result.stderr


async def test_the_routers_own_address_is_never_blocked(fleet, sql):
    settings, client = fleet
    # The router calls through the proxy from 8.8.4.4 (a trusted proxy forwards it), and its
    # own Suricata alerts on packets claiming to come from there.
    forwarded = {"X-Forwarded-For": "8.8.4.4"}
    response = await client.get("/rules/last_updated", headers={"X-ID": VICTIM, **forwarded})
    assert response.status == 200
    await post(client, alerts("8.8.4.4", [9000001, 9000003, 9000003]), **forwarded)
    await post(client, alerts("9.9.9.9", [9000001, 9000003, 9000003], flow=100), **forwarded)
    entries = firewall(settings, sql)
    assert "8.8.4.4" not in entries and "9.9.9.9" in entries


# IPv4 8.8.4.4 and 127.0.0.1 as IPv6 writes them: IPv4-mapped, NAT64, 6to4, IPv4-compatible.
FORMS_OF_8_8_4_4 = ["::ffff:8.8.4.4", "64:ff9b::808:404", "2002:808:404::1", "::8.8.4.4"]
FORMS_OF_LOOPBACK = ["::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1", "::127.0.0.1"]


@pytest.mark.parametrize("address", FORMS_OF_LOOPBACK)
def test_ipv4_in_ipv6_forms_are_judged_by_their_ipv4_address(address):
    """Issue 27, finding 4: these counted as external, so they could be blocked."""
    assert not is_external(address)
    assert carried(address) == ipaddress.ip_address("127.0.0.1")


@pytest.mark.parametrize("address", FORMS_OF_8_8_4_4)
def test_allowlist_and_own_address_hold_for_every_form(address):
    assert is_external(address) and carried(address) == ipaddress.ip_address("8.8.4.4")
    assert Exemptions.of(["8.8.0.0/16"], []).exempt(address)
    assert Exemptions.of([], ["8.8.4.4"]).exempt(address)
    assert Exemptions.of([], [address]).exempt("8.8.4.4")
    assert not Exemptions.of(["9.9.0.0/16"], ["1.1.1.1"]).exempt(address)


async def test_allowlisted_network_is_not_blocked_in_any_ipv6_form(fleet, sql):
    settings, client = fleet
    for number, address in enumerate(FORMS_OF_8_8_4_4):
        await post(client, alerts(address, [9000001, 9000003, 9000003], flow=100 * number))
    # Stored in their one form (issue 50): the IPv4 address, and 6to4's own IPv6 address.
    stored = {"8.8.4.4", "2002:808:404::1"}
    assert stored <= set(firewall(settings, sql))  # blockable without a rule
    assert command(settings, "allowlist", "add", "8.8.0.0/16").returncode == 0
    assert not (stored | set(FORMS_OF_8_8_4_4)) & set(firewall(settings, sql))


async def test_what_the_intel_holds_or_its_own_rules_saw_is_never_blocked(fleet, sql):
    """The red team's fifth attack: three alerts of the intel's DNS rule (sid 1990001) to a
    resolver put it in the router's firewall for a week, although the intel held it. The
    intel rules' alerts are no evidence, and what the intel holds as seen by too much of the
    fleet is never blocked; a network held only for its breadth is no exemption."""
    settings, client = fleet
    await post(client, alerts("8.8.4.4", [1990001, 1990001, 1990001]))
    await post(client, alerts("9.9.9.9", [9000001, 9000003, 9000003], flow=100))
    await post(client, alerts("45.0.0.9", [9000001, 9000003, 9000003], flow=200))
    blocked = firewall(settings, sql)
    assert "8.8.4.4" not in blocked and {"9.9.9.9", "45.0.0.9"} <= set(blocked)
    sql.rows("INSERT INTO intel_decisions (kind, value, decision, routers, note, decided_by) "
             "VALUES ('ip', '9.9.9.9', 'held', 40, 'seen by too much of the fleet', 'job'), "
             "('network', '45.0.0.0/8', 'held', NULL, 'a broad network', 'job')")
    blocked = firewall(settings, sql)
    assert "9.9.9.9" not in blocked and "45.0.0.9" in blocked
