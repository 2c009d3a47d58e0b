"""The fleet's list follows what a router says one of its firewall sets holds
(Router-Capacity `sets`, issue 82): a smaller router gets the fleet's most widely reported
entries first, routers of like capacity share one document, and one that names nothing gets
the whole list. The threat intelligence's block entries fit `sets` too."""

from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta, timezone

import pytest

from server.fleet import sql as fleet_db
from server.fleet.document import FleetLists
from server.intel.capacity import Capacity, capacity
from server.polling.capacity import CapacityInvalid
from server.typedefs import DATABASE, FLEET_LIST
from tests.test_agent import config_for, run_round, url_of
from testkit.database import settings_for
from testkit.waiting import wait_for

MACS = ("02:82:00:00:02:01", "02:82:00:00:02:02")
LISTED = 1_500
START = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _entry(n: int) -> dict:
    """The nth attacker: seen at 2 to 51 networks, each seen at its own time."""
    address = str(ipaddress.IPv4Address("45.33.0.1") + n)
    seen = START + timedelta(minutes=n)
    return {"address": address, "routers": 60, "networks": 2 + (n * 7) % 50, "alerts": 10,
            "severity": 2, "signatures": [2010935], "first_seen": seen.isoformat(),
            "last_seen": seen.isoformat(),
            "expires_at": (seen + timedelta(days=2)).isoformat(), "reporters": []}


def _worth_most(entries: list[dict], count: int) -> set[str]:
    """The `count` entries of most networks, then routers, then the most recently seen
    day, then the lowest address."""
    def rank(entry: dict) -> tuple:
        day = datetime.fromisoformat(entry["last_seen"]).date().toordinal()
        return (-entry["networks"], -entry["routers"], -day,
                int(ipaddress.ip_address(entry["address"])))
    return {entry["address"] for entry in sorted(entries, key=rank)[:count]}


@pytest.mark.parametrize("header,entries", [
    (None, None), ("datasets=1000", None), ("sets=65536", None), ("sets=10000", None),
    ("sets=9999", 3_000), ("sets=1000", 1_000), ("sets=999", 0), ("sets=0", 0)])
def test_a_router_gets_the_largest_list_one_of_its_sets_holds(header, entries):
    made: list[int | None] = []
    lists = FleetLists(lambda size: made.append(size) or size, 10_000)
    assert lists.for_router(header) == entries
    assert lists.for_router(header) == entries and made.count(entries) == 1  # made once


@pytest.mark.parametrize("header", ["sets=-1", "sets=1e6", "sets=1, sets=2", "sets=" + "9" * 16,
                                    "sets=a"])
def test_a_malformed_set_capacity_is_refused(header):
    with pytest.raises(CapacityInvalid):
        FleetLists(lambda size: size, 10_000).for_router(header)


@pytest.mark.parametrize("header,wanted", [
    ("sets=1000, datasets=30000", Capacity(30_000, False, 1_000)),
    ("sets=65536, datasets=30000", Capacity(30_000, False)),
    ("sets=65536, datasets=100000", Capacity(100_000, False, 30_000)),
    ("sets=65536", Capacity(10_000, False)),   # no datasets' bound: the default
    ("sets=2000", Capacity(10_000, False, 1_000)),
    ("sets=10", Capacity(10_000, False, 0))])
def test_the_intelligence_block_entries_fit_a_set(header, wanted):
    assert capacity(header, 100_000) == wanted


async def _fleet(client, mac: str, header: str | None) -> tuple[int, dict, str]:
    headers = {"X-ID": mac, **({"Router-Capacity": header} if header is not None else {})}
    response = await client.get("/rules/fleet", headers=headers)
    body = await response.json() if response.status == 200 else {}
    return response.status, body, response.headers.get("ETag", "")


async def test_a_smaller_router_keeps_the_most_widely_reported_and_shares_its_document(
        make_client, database, tmp_path):
    client = await make_client(settings_for(database, tmp_path,
                                            FLEET_CRON_SCHEDULE="0 0 1 1 *"))
    stored = [_entry(n) for n in range(LISTED)]
    await fleet_db.replace(client.app[DATABASE], stored, [])
    whole = client.app[FLEET_LIST].whole

    async def holds_all() -> bool:
        return (await whole.served(MACS[0])).entries == LISTED
    await wait_for(holds_all, timeout=10, interval=0.05)

    status, document, _ = await _fleet(client, MACS[0], None)
    assert status == 200 and document["entry_count"] == LISTED
    status, small, etag = await _fleet(client, MACS[0], "sets=1000, datasets=30000, ja4=0")
    assert status == 200 and small["entry_count"] == 1_000 == len(small["entries"])
    assert {entry["address"] for entry in small["entries"]} == _worth_most(stored, 1_000)
    _, other, other_etag = await _fleet(client, MACS[1], "sets=1500")  # also 1,000
    assert other == small and other_etag == etag
    response = await client.get("/rules/fleet", headers={
        "X-ID": MACS[1], "Router-Capacity": "sets=1500", "If-None-Match": etag})
    assert response.status == 304
    response = await client.get("/rules/last_updated", headers={
        "X-ID": MACS[1], "Router-Capacity": "sets=1500"})
    assert response.status == 200 and (await response.json())["fleet_etag"] == etag
    status, empty, _ = await _fleet(client, MACS[1], "sets=10")
    assert status == 200 and empty == {"entry_count": 0, "entries": []}


async def test_a_malformed_capacity_is_a_400_on_the_fleet_list(make_client, database,
                                                                  tmp_path):
    client = await make_client(settings_for(database, tmp_path))
    for header in ("sets=-5", "sets=" + "1" * 300, "sets=1, sets=1"):
        status, _, _ = await _fleet(client, MACS[0], header)
        assert status == 400
    status, _, _ = await _fleet(client, MACS[0], "sets=1000")
    assert status == 200


async def test_an_agent_applies_the_list_its_sets_hold(make_client, database, tmp_path):
    """The reference agent says `set_entries` on its polls and loads the list it is sent."""
    client = await make_client(settings_for(database, tmp_path,
                                            FLEET_CRON_SCHEDULE="0 0 1 1 *"))
    stored = [_entry(n) for n in range(LISTED)]
    await fleet_db.replace(client.app[DATABASE], stored, [])
    config = config_for(tmp_path, url_of(client), set_entries=1_000, intel=False,
                        firewall_test_command=("true",), firewall_reload_command=("true",))
    assert "sets=1000" in config.capacity_header
    assert "sets=" not in config_for(tmp_path, url_of(client)).capacity_header.replace(
        "datasets=", "")  # not said by default
    assert (await run_round(config))[0] == 0
    loaded = {element for line in config.fleet_path.read_text().splitlines()
              if line.startswith("add element")
              for element in line.split("{ ", 1)[1].rstrip(" }").split(", ")}
    assert loaded == _worth_most(stored, 1_000)
