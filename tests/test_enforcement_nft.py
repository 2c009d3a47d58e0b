"""The reference agent against real nftables in a network namespace the test makes (issue
82): its sets hold exactly the payloads after each change (its own list's, the fleet's and
the threat intelligence's, the last two by deltas), applied element by element; a listed
address never passes while
its set changes; what the sets dropped (their elements'
counters) reaches the service as an enforcement report, every packet counted once. Skipped where no namespace
can be made (not root, no `ip netns`, no `nft`)."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from server.db.lifecycle import open_database
from server.fleet import sql as fleet_db
from server.intel import sql as intel_db
from server.telemetry.indicators import feed_value
from server.typedefs import FLEET_LIST, INTEL_LIST
from testkit.waiting import wait_for
from testkit.database import settings_for
from testkit.payloads import store_payload_objects
from tests.test_agent import (MAC, config_for, firewall_payload, fleet_entry, fleet_served,
                              run_round, url_of)

OWN, KEPT, FLEET = "62.210.1.5", "62.210.1.6", "77.88.1.9"
INTEL = "77.88.2.9"  # a feed's address, in every version of the intelligence

# The agent's sets as docs/agent.md declares them, and what the namespace's own traffic
# meets: the block sets drop; a packet to KEPT that got past them is counted as passed.
RULESET = """table inet filter {
  set router_backend_block_v4 { type ipv4_addr; flags interval; counter; }
  set router_backend_block_v6 { type ipv6_addr; flags interval; counter; }
  set router_backend_fleet_v4 { type ipv4_addr; flags interval; counter; }
  set router_backend_fleet_v6 { type ipv6_addr; flags interval; counter; }
  set router_backend_intel_v4 { type ipv4_addr; flags interval; counter; }
  set router_backend_intel_v6 { type ipv6_addr; flags interval; counter; }
  chain output {
    type filter hook output priority 0;
    ip daddr @router_backend_block_v4 drop
    ip daddr @router_backend_fleet_v4 drop
    ip daddr @router_backend_intel_v4 drop
    ip daddr { %s } counter name passed accept
  }
  counter passed { }
}
""" % ", ".join((KEPT, FLEET, INTEL))


def _namespaces_work() -> bool:
    if shutil.which("nft") is None or shutil.which("ip") is None:
        return False
    name = f"rbcheck{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True)
    if made.returncode != 0:
        return False
    subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    return True


pytestmark = pytest.mark.skipif(not _namespaces_work(),
                                reason="no network namespace with nftables can be made here")


@pytest.fixture
def namespace():
    name = f"rbtest{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    inside = ["ip", "netns", "exec", name]
    try:
        subprocess.run([*inside, "ip", "link", "set", "lo", "up"], check=True)
        for address in (OWN, KEPT, FLEET, INTEL):
            subprocess.run([*inside, "ip", "addr", "add", f"{address}/32", "dev", "lo"],
                           check=True)
        subprocess.run([*inside, "nft", "-f", "-"], input=RULESET.encode(), check=True)
        yield inside
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def _elements(inside: list[str], set_name: str) -> set[str]:
    listed = subprocess.run([*inside, "nft", "-j", "list", "set", "inet", "filter", set_name],
                            capture_output=True, check=True).stdout
    held = set()
    for item in json.loads(listed)["nftables"]:
        for element in (item.get("set") or {}).get("elem", []):
            value = element["elem"]["val"]
            held.add(value if isinstance(value, str) else
                     f"{value['prefix']['addr']}/{value['prefix']['len']}")
    return held


def _passed(inside: list[str]) -> int:
    listed = subprocess.run([*inside, "nft", "-j", "list", "counter", "inet", "filter",
                             "passed"], capture_output=True, check=True).stdout
    return next(item["counter"]["packets"] for item in json.loads(listed)["nftables"]
                if "counter" in item)


SENDER = """import os, socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = 0
while sent < int(sys.argv[2]) and not os.path.exists(sys.argv[3]):
    try:
        sock.sendto(b"x", (sys.argv[1], 9))
    except OSError:  # dropped by the firewall: EPERM
        pass
    sent += 1
print(sent)
"""


def _send(inside: list[str], address: str, packets: int, stop: str = "/nonexistent"
          ) -> subprocess.Popen:
    """A sender in the namespace: `packets` UDP packets to `address`, or fewer once the file
    `stop` exists; it prints how many it sent."""
    return subprocess.Popen([*inside, sys.executable, "-c", SENDER, address, str(packets),
                             stop], stdout=subprocess.PIPE)


async def _sent(sender: subprocess.Popen) -> int:
    return int((await asyncio.to_thread(sender.communicate))[0])


def _agent(tmp_path, client, inside: list[str], intel: bool = False):
    nft = [*inside, "nft"]
    return config_for(tmp_path, url_of(client), intel=intel, test_command=("true",),
                      reload_command=("true",),
                      firewall_test_command=(*nft, "-c", "-f", "{firewall_file}"),
                      firewall_reload_command=(*nft, "-f", "{firewall_file}"),
                      counters_command=(*nft, "-j", "list", "set", "{set}"),
                      enforcement_seconds=1e-6)


@pytest.mark.drill  # real nftables, a namespace, a sender running through reloads
async def test_sets_follow_the_payloads_no_listed_packet_passes_and_drops_are_reported(
        make_client, database, tmp_path, namespace, sql):
    settings = settings_for(database, tmp_path / "server", FLEET_CRON_SCHEDULE="0 0 1 1 *")
    client = await make_client(settings)
    config = _agent(tmp_path, client, namespace)
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, {"firewall": firewall_payload(OWN, KEPT)})
        await fleet_db.replace(db, [fleet_entry(FLEET)], [])
    await fleet_served(client, entries=1)
    assert (await run_round(config))[0] == 0
    assert _elements(namespace, "router_backend_block_v4") == {OWN, KEPT}
    assert _elements(namespace, "router_backend_fleet_v4") == {FLEET}

    assert await _sent(_send(namespace, OWN, 30)) == 30
    assert await _sent(_send(namespace, FLEET, 25)) == 25

    # The own list changes five times while a sender hammers KEPT, listed in every version:
    # nothing passes.
    stop = tmp_path / "stop"
    hammer = _send(namespace, KEPT, 10_000_000, str(stop))
    for n in range(5):
        async with open_database(settings) as db:
            await store_payload_objects(db, MAC, {"firewall": firewall_payload(
                OWN, KEPT, f"62.210.2.{n}")})
        assert (await run_round(config))[0] == 0
        assert _elements(namespace, "router_backend_block_v4") == {OWN, KEPT, f"62.210.2.{n}"}
        if n == 2:  # between two reloads: OWN's count is carried across them
            assert await _sent(_send(namespace, OWN, 20)) == 20
    stop.touch()
    hammered = await _sent(hammer)
    assert _passed(namespace) == 0

    # Each change was applied element by element: the last one deleted 62.210.2.3 and
    # added 62.210.2.4, and what was kept kept its counter.
    assert config.firewall_file.with_name("block.nft.changes").read_text().splitlines()[1:] \
        == ["delete element inet filter router_backend_block_v4 { 62.210.2.3 }",
            "add element inet filter router_backend_block_v4 { 62.210.2.4 }"]
    # What was dropped: every packet counted once, though the set changed five times.
    assert (await run_round(config))[0] == 0
    days = dict(sql.rows("SELECT list, packets FROM enforcement_days"))
    hits = dict(sql.rows("SELECT host(entry), packets FROM enforcement_hits"))
    assert hits[OWN] == 50 and hits[FLEET] == 25 and days["fleet"] == 25
    assert hits[KEPT] == hammered and days["firewall"] == 50 + hammered
    assert (await run_round(config))[0] == 0  # nothing new: nothing added
    assert dict(sql.rows("SELECT list, packets FROM enforcement_days")) == days


async def _document_holds(document, address: str) -> bool:
    return address.encode() in gzip.decompress((await document.served(MAC)).packed)


async def _intel_version(db, addresses: list[str]) -> None:
    """The feed's next version, judged (as a retro-hunt does): delivered."""
    now = datetime.now(timezone.utc)
    if not await intel_db.feeds(db, "drill"):
        await intel_db.add_feed(db, "drill", None, "plain", "ip", 50, "test")
    rows = [("ip", feed_value("ip", address), 50, now, now, now + timedelta(days=30))
            for address in addresses]
    await intel_db.swap_version(db, "drill", rows, len(rows), {}, None, None, "test")
    async with db.transaction() as cur:
        await intel_db.mark_hunted(cur, [("ip", value) for _, value, *_ in rows])


@pytest.mark.drill  # real nftables, a namespace, senders running through reloads
async def test_the_fleet_list_and_the_intelligence_change_and_no_listed_packet_passes(
        make_client, database, tmp_path, namespace, sql):
    """The fleet's list and the threat intelligence change four times each under a live
    agent, by deltas, while two senders hammer an address each lists in every version:
    after each change the sets hold exactly the documents, nothing passes, and every packet
    they dropped is reported once (an element kept keeps its counter)."""
    settings = settings_for(database, tmp_path / "server", FLEET_CRON_SCHEDULE="0 0 1 1 *")
    client = await make_client(settings)
    config = _agent(tmp_path, client, namespace, intel=True)
    fleet, intel = client.app[FLEET_LIST].whole, client.app[INTEL_LIST].for_router(None)

    # Twenty addresses more in every version of each, as a real list keeps most of its
    # entries from one version to the next.
    fleet_kept = [FLEET, *(f"77.88.5.{4 * k + 1}" for k in range(20))]  # none adjacent
    intel_kept = [INTEL, *(f"77.88.6.{4 * k + 1}" for k in range(20))]

    async def change(n: int) -> None:
        async with open_database(settings) as db:
            await fleet_db.replace(db, [fleet_entry(address) for address in
                                        (*fleet_kept, f"77.88.4.{n}")], [])
            await _intel_version(db, [*intel_kept, f"77.88.3.{n}"])
        await wait_for(lambda: _document_holds(fleet, f"77.88.4.{n}"), timeout=10)
        await wait_for(lambda: _document_holds(intel, f"77.88.3.{n}"), timeout=10)

    await change(0)
    assert (await run_round(config))[0] == 0
    stop = tmp_path / "stop"
    hammers = [_send(namespace, address, 10_000_000, str(stop)) for address in (FLEET, INTEL)]
    for n in range(1, 5):
        await change(n)
        assert (await run_round(config))[0] == 0
        assert _elements(namespace, "router_backend_fleet_v4") == {*fleet_kept, f"77.88.4.{n}"}
        assert _elements(namespace, "router_backend_intel_v4") == {*intel_kept, f"77.88.3.{n}"}
    stop.touch()
    sent = [await _sent(hammer) for hammer in hammers]
    assert all(count > 0 for count in sent)
    assert _passed(namespace) == 0
    state = json.loads((config.state_dir / "state.json").read_text())["applied"]
    assert state["fleet"]["delta"] is True and state["intel"]["delta"] is True
    assert (await run_round(config))[0] == 0  # the report of what was dropped
    hits = dict(sql.rows("SELECT list || ' ' || host(entry), packets FROM enforcement_hits"))
    assert hits[f"fleet {FLEET}"] == sent[0] and hits[f"intel {INTEL}"] == sent[1]
