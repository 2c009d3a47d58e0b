"""The reference agent against real nftables in a network namespace the test makes (issue
82): its sets hold exactly the payloads after each change, applied element by element; a
listed address never passes while its set changes; what the sets dropped (their elements'
counters) reaches the service as an enforcement report, every packet counted once. Skipped where no namespace
can be made (not root, no `ip netns`, no `nft`)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import uuid

import pytest

from server.db.lifecycle import open_database
from server.fleet import sql as fleet_db
from testkit.database import settings_for
from testkit.payloads import store_payload_objects
from tests.test_agent import (MAC, config_for, firewall_payload, fleet_entry, fleet_served,
                              run_round, url_of)

OWN, KEPT, FLEET = "62.210.1.5", "62.210.1.6", "77.88.1.9"

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
    ip daddr %s counter name passed accept
  }
  counter passed { }
}
""" % KEPT


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
        for address in (OWN, KEPT, FLEET):
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


def _agent(tmp_path, client, inside: list[str]):
    nft = [*inside, "nft"]
    return config_for(tmp_path, url_of(client), intel=False,
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
