"""Routers report what their firewall enforced (POST /rules/enforced, issue 82): stored per
router and day for what the router holds only, bounded per router-day, counted for the
fleet by networks so that cheap MACs move nothing; hostile reports refused whole."""

from __future__ import annotations

import asyncio
import gzip
import json
from datetime import datetime, timedelta, timezone

import pytest

from server.enforcement.config import EnforcementConfig
from server.enforcement.figures import effectiveness
from server.enforcement.jobs import set_figures
from server.fleet import sql as fleet_db
from server.generation.rules_sql import store_payloads
from server.intel import sql as intel_db
from server.removal import unsubscribe
from server.telemetry.indicators import feed_value
from server.tuning import allowlist_sql
from server.typedefs import DATABASE, FLEET_LIST, METRICS, SETTINGS
from testkit.database import command_env, settings_for
from testkit.waiting import wait_for
from tests.commands import router_backend_output
from tests.test_agent import fleet_entry
from tests.test_console import SUPPORT, console_settings, sign_in

MAC = "02:82:00:00:02:01"
OWN, FLEET, INTEL_IP, INTEL_NET = "62.210.1.5", "77.88.1.9", "81.2.69.77", "91.198.0.0/16"


async def _poll(client, mac: str, address: str = "47.1.1.1") -> None:
    answer = await client.get("/rules/last_updated", headers={"X-ID": mac,
                                                               "X-Forwarded-For": address})
    assert answer.status == 200, await answer.text()


async def _report(client, mac: str, body, address: str = "47.1.1.1"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = await client.post("/rules/enforced", data=data, headers={
        "X-ID": mac, "X-Forwarded-For": address, "Content-Type": "application/json"})
    return answer.status, await answer.json()


async def _own_list(db, mac: str, addresses: list[str]) -> None:
    payload = {"version": "test", "entry_count": len(addresses), "truncated": False,
               "entries": [{"address": address, "family": 4, "reasons": ["operator"]}
                           for address in addresses]}
    await store_payloads(db, mac, {"firewall": (gzip.compress(json.dumps(payload).encode()),
                                                f"own-{len(addresses)}")})


def _hits(*entries: tuple[str, int]) -> list[dict]:
    return [{"address": entry, "packets": packets, "bytes": packets * 100}
            for entry, packets in entries]


def _list(*entries: tuple[str, int], extra: int = 0) -> dict:
    packets = sum(n for _, n in entries) + extra
    return {"packets": packets, "bytes": packets * 100, "entries": _hits(*entries)}


@pytest.fixture
def settings(database, tmp_path):
    """The fleet job kept from its start (it would replace the fleet's list this file
    writes with its own count, none, when a loaded machine starts it late)."""
    return settings_for(database, tmp_path, FLEET_CRON_SCHEDULE="0 0 1 1 *")


async def _lists_held(client, sql, *macs: str) -> None:
    """Routers holding OWN in their own list, FLEET in the fleet's, and an intel document
    whose block entries are INTEL_IP and INTEL_NET (a feed `f`, fetched and polled)."""
    db = client.app[DATABASE]
    for mac in macs:
        await _poll(client, mac)
    for mac in macs:
        await _own_list(db, mac, [OWN])
    sql.rows("""INSERT INTO fleet_attackers (address, routers, networks, alerts, severity,
                signatures, first_seen, last_seen, expires_at, reporters)
                VALUES (%s, 5, 5, 10, 1, '{}', now(), now(), now() + interval '1 day', '[]')""",
             (FLEET,))
    now = datetime.now(timezone.utc)
    await intel_db.add_feed(db, "f", None, "plain", None, 50, "test")
    taken = [(kind, feed_value(kind, value), 50, now, now, now + timedelta(days=30))
             for kind, value in (("ip", INTEL_IP), ("network", INTEL_NET))]
    await intel_db.swap_version(db, "f", taken, len(taken), {}, None, None, "test")
    async with db.transaction() as cur:
        await intel_db.mark_hunted(cur, [(kind, value) for kind, value, *_ in taken])
    async def blocked() -> bool:  # once the feed's notification reached the app
        answer = await client.get("/rules/intel", headers={"X-ID": macs[0]})
        held = {entry["address"] for entry in (await answer.json())["block"]}
        return held == {INTEL_IP, INTEL_NET}
    await wait_for(blocked, timeout=30, interval=0.05)
    await _recorded(sql)


async def _recorded(sql) -> None:
    """Until the document served is recorded as a version (beside the poll that built it):
    what a report's entries are checked against."""
    held = "SELECT count(*) FROM document_items WHERE place = 'block' AND until_serial IS NULL"
    async with asyncio.timeout(30):
        while await asyncio.to_thread(sql.value, held) < 2:
            await asyncio.sleep(0.05)


async def test_a_report_stores_what_the_router_holds_and_ignores_the_rest(client, sql):
    await _lists_held(client, sql, MAC)
    status, body = await _report(client, MAC, {"lists": {
        # never sent to it, no address, named twice: ignored
        "firewall": _list((OWN, 7), ("62.210.1.99", 3), ("not-an-address", 1), (OWN, 1)),
        "fleet": _list((FLEET, 2)),
        "intel": {**_list((INTEL_IP, 4), (INTEL_NET, 1)), "alerts": 3}}})
    assert status == 200, body
    assert body["lists"]["firewall"] == {"entries": 1, "ignored": 3, "over_budget": 0}
    assert body["lists"]["intel"] == {"entries": 2, "ignored": 0, "over_budget": 0}
    await _report(client, MAC, {"lists": {"firewall": _list((OWN, 5))}})  # added to the day
    days = sql.rows("SELECT list, packets, alerts, reports, network::text FROM "
                    "enforcement_days ORDER BY list")
    assert days == [("firewall", 17, 0, 2, "47.1.1.0/24"), ("fleet", 2, 0, 1, "47.1.1.0/24"),
                    ("intel", 5, 3, 1, "47.1.1.0/24")]
    hits = sql.rows("SELECT list, host(entry), masklen(entry), packets FROM enforcement_hits "
                    "ORDER BY list, entry")
    assert hits == [("firewall", OWN, 32, 12), ("fleet", FLEET, 32, 2),
                    ("intel", INTEL_IP, 32, 4), ("intel", "91.198.0.0", 16, 1)]


def _body_of(size: int) -> dict:
    return {"lists": {"firewall": _list(*((f"62.210.{n >> 8}.{n & 255}", 1)
                                         for n in range(size)))}}


@pytest.mark.parametrize("body", [
    b"not json", b"[]", {"lists": []}, {"lists": {}, "more": 1},
    {"lists": {"mine": _list()}},
    {"lists": {"firewall": {"packets": -1, "bytes": 0}}},
    {"lists": {"firewall": {"packets": 2 ** 63, "bytes": 0}}},
    {"lists": {"firewall": {"packets": 1.5, "bytes": 0}}},
    {"lists": {"firewall": {"packets": True, "bytes": 0}}},
    {"lists": {"firewall": {"packets": 1, "bytes": 1, "entries": _hits(("x" * 1_000_000, 1))}}},
    {"lists": {"firewall": {"packets": "1", "bytes": 0}}},
    {"lists": {"firewall": {"packets": 1, "bytes": 1, "alerts": 1}}},
    {"lists": {"firewall": {"packets": 1, "bytes": 100, "entries": [{"address": OWN}]}}},
    _body_of(101),
], ids=lambda body: (body if isinstance(body, bytes) else json.dumps(body))[:60])
async def test_a_hostile_report_is_refused_whole_and_stores_nothing(client, sql, body):
    await _lists_held(client, sql, MAC)
    status, answer = await _report(client, MAC, body)
    assert status in (400, 413), answer
    assert "error" in answer
    assert sql.value("SELECT count(*) FROM enforcement_days") == 0
    assert sql.value("SELECT count(*) FROM enforcement_hits") == 0


async def test_counts_past_a_line_day_are_kept_at_its_bound(client, sql):
    await _lists_held(client, sql, MAC)
    huge = 2 ** 63 - 1
    for _ in range(2):  # twice: the sum never overflows either
        status, _ = await _report(client, MAC, {"lists": {"firewall": {
            "packets": huge, "bytes": huge, "entries": [
                {"address": OWN, "packets": huge, "bytes": huge}]}}})
        assert status == 200
    packets, bytes_ = sql.rows("SELECT packets, bytes FROM enforcement_days")[0]
    assert bytes_ == 10 ** 10 // 8 * 86_400 and packets == bytes_ // 64


async def test_an_unregistered_or_unkeyed_router_stores_nothing(make_client, database,
                                                                tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path, ROUTER_AUTH="key"))
    status, _ = await _report(client, MAC, {"lists": {"firewall": _list()}})
    assert status == 401
    assert sql.value("SELECT count(*) FROM enforcement_days") == 0


async def test_a_router_day_keeps_at_most_its_entries_whatever_the_reports(
        make_client, database, tmp_path, sql):
    client = await make_client(settings_for(database, tmp_path,
                                            ENFORCEMENT_ENTRIES_PER_ROUTER_DAY="5"))
    await _poll(client, MAC)
    own = [f"62.210.1.{n}" for n in range(1, 41)]
    await _own_list(client.app[DATABASE], MAC, own)
    reports = [{"lists": {"firewall": _list(*((a, 1) for a in own[n * 8:n * 8 + 8]))}}
               for n in range(5)]
    answers = await asyncio.gather(*(_report(client, MAC, body) for body in reports))
    assert all(status == 200 for status, _ in answers)
    assert sum(a["lists"]["firewall"]["entries"] for _, a in answers) == 5
    assert sum(a["lists"]["firewall"]["over_budget"] for _, a in answers) == 35
    assert sql.value("SELECT count(*) FROM enforcement_hits") == 5
    kept = [row[0] for row in sql.rows("SELECT host(entry) FROM enforcement_hits")]
    status, answer = await _report(client, MAC, {"lists": {"firewall": _list((kept[0], 9))}})
    assert answer["lists"]["firewall"]["entries"] == 1  # a kept entry is still added to
    assert sql.value("SELECT packets FROM enforcement_days") == 40 + 9


def _mac(prefix: str, n: int) -> str:
    return f"{prefix}:00:00:{n >> 8:02x}:{n & 255:02x}"


async def test_cheap_macs_move_an_entry_by_their_networks_only(client, sql):
    honest = [_mac("02:83", n) for n in range(3)]
    crowd = [_mac("02:84", n) for n in range(20)]   # one owner's, behind one /24
    fresh = [_mac("02:85", n) for n in range(100)]  # registered just now
    await _lists_held(client, sql, *honest, *crowd, *fresh)
    sql.rows("UPDATE routers SET registered_at = now() - interval '4 days' "
             "WHERE mac::text NOT LIKE '02:85:%%'")
    sql.rows("""INSERT INTO fleet_attackers (address, routers, networks, alerts, severity,
                signatures, first_seen, last_seen, expires_at, reporters)
                VALUES ('77.88.1.10', 5, 5, 10, 1, '{}', now(), now(),
                        now() + interval '1 day', '[]')""")
    for n, mac in enumerate(honest):  # three networks, a little traffic each
        await _report(client, mac, {"lists": {"fleet": _list((FLEET, 2))}}, f"47.{n}.0.1")
    for mac in crowd:
        await _report(client, mac, {"lists": {"fleet": _list(("77.88.1.10", 10 ** 9))}},
                      "48.0.0.1")
    for n, mac in enumerate(fresh):  # from a hundred networks, but fresh
        await _report(client, mac, {"lists": {"fleet": _list(("77.88.1.10", 10 ** 9))}},
                      f"49.{n}.0.1")
    settings = client.app[SETTINGS]
    counted = await effectiveness(client.app[DATABASE], EnforcementConfig.from_settings(
        settings), 7)
    fleet = [entry for entry in counted.top if entry.list == "fleet"]
    assert [(e.entry, e.networks, e.routers) for e in fleet] == [
        (f"{FLEET}/32", 3, 3), ("77.88.1.10/32", 1, 20)]
    lists = {figures.list: figures for figures in counted.lists}
    assert lists["fleet"].routers == 23 and lists["fleet"].networks == 4
    assert lists["fleet"].packets == 6 + 20 * 10 ** 9  # the fresh MACs' not counted
    assert lists["fleet"].entries_never_matched == 0


async def test_a_feed_is_credited_with_its_matched_values(client, sql):
    routers = [_mac("02:86", n) for n in range(4)]
    await _lists_held(client, sql, *routers)
    sql.rows("UPDATE routers SET registered_at = now() - interval '4 days'")
    for n, mac in enumerate(routers[:3]):
        status, stored = await _report(client, mac, {"lists": {"intel": {
            **_list((INTEL_IP, 5)), "alerts": 1}}}, f"47.{n}.0.1")
        assert status == 200 and stored["lists"]["intel"]["entries"] == 1, stored
    await _report(client, routers[3], {"lists": {"intel": _list()}}, "47.9.0.1")
    counted = await effectiveness(client.app[DATABASE], EnforcementConfig.from_settings(
        client.app[SETTINGS]), 1)
    (feed,) = counted.feeds
    assert (feed.feed, feed.values, feed.values_matched, feed.values_never_matched,
            feed.matched_routers, feed.matched_networks, feed.packets) == ("f", 2, 1, 1, 3,
                                                                          3, 15)
    (intel,) = counted.lists
    assert (intel.routers, intel.networks, intel.matched_routers, intel.alerts) == (4, 4, 3, 3)
    done = await asyncio.to_thread(router_backend_output, command_env(client.app[SETTINGS]),
                                   "enforcement", "--days", "1", "--json")
    assert json.loads(done) == counted.as_json()
    text = await asyncio.to_thread(router_backend_output, command_env(client.app[SETTINGS]),
                                   "enforcement", "--days", "1")
    assert "\nf\t2\t1\t1\t3\t3\t15\t1500\n" in text
    assert f"intel\t{INTEL_IP}/32\t3\t3\t15\t1500" in text
    await set_figures(client.app[DATABASE], EnforcementConfig.from_settings(
        client.app[SETTINGS]), client.app[METRICS])
    scraped = await (await client.get("/metrics")).text()
    assert 'intel_feed_enforcement_last_day{feed="f",figure="packets"} 15.0' in scraped
    assert 'enforcement_last_day{figure="matched_networks",list="intel"} 3.0' in scraped


async def test_the_console_shows_what_the_fleet_and_each_router_enforced(make_client, settings,
                                                                        sql):
    client = await make_client(console_settings(settings))
    await _lists_held(client, sql, MAC)
    sql.rows("UPDATE routers SET registered_at = now() - interval '4 days'")
    await _report(client, MAC, {"lists": {"fleet": _list((FLEET, 4))}})
    assert (await sign_in(client, SUPPORT)).status == 303
    page = await (await client.get("/console/intel")).text()
    assert "<tr><td>fleet</td><td>1</td><td>1</td><td>1</td><td>1</td><td>4</td><td>400</td>" \
        in page
    assert f"<td><code>{FLEET}/32</code></td><td>1</td><td>1</td><td>4</td>" in page
    page = await (await client.get(f"/console/routers/{MAC}")).text()
    assert "<td>fleet</td><td>4</td><td>400</td><td>0</td><td>1</td>" in page


async def test_a_small_router_keeps_first_what_matched_at_many_networks(
        make_client, database, tmp_path, sql):
    # The reports reorder the intel only where they are the routers' own (key mode, or
    # FLEET_ATTACKERS_IN_MAC_MODE), and from FLEET_MIN_NETWORKS networks.
    client = await make_client(settings_for(database, tmp_path, FLEET_MIN_NETWORKS="3",
                                            FLEET_ATTACKERS_IN_MAC_MODE="true"))
    db = client.app[DATABASE]
    routers = [_mac("02:87", n) for n in range(3)]
    for n, mac in enumerate(routers):
        await _poll(client, mac, f"47.{n}.0.1")
    sql.rows("UPDATE routers SET registered_at = now() - interval '4 days'")
    now = datetime.now(timezone.utc)
    common = [f"81.2.{n // 128}.{(n % 128) * 2}" for n in range(1_200)]  # none adjacent
    low = "81.9.0.1"
    taken = [("ip", feed_value("ip", address), 90, now, now, now + timedelta(days=30))
             for address in common]
    taken.append(("ip", feed_value("ip", low), 10, now, now, now + timedelta(days=30)))
    await intel_db.add_feed(db, "f", None, "plain", None, 50, "test")
    await intel_db.swap_version(db, "f", taken, len(taken), {}, None, None, "test")
    async with db.transaction() as cur:
        await intel_db.mark_hunted(cur, [(kind, value) for kind, value, *_ in taken])

    async def small() -> set[str]:
        answer = await client.get("/rules/intel", headers={
            "X-ID": routers[0], "Router-Capacity": "datasets=1000"})
        return {entry["address"] for entry in (await answer.json())["block"]}
    assert low not in await small()  # the least confident: trimmed
    whole = await client.get("/rules/intel", headers={"X-ID": routers[0]})
    assert low in {entry["address"] for entry in (await whole.json())["block"]}
    held = ("SELECT count(*) FROM document_items WHERE document = 'intel-10000' "
            "AND place = 'block' AND until_serial IS NULL")
    async with asyncio.timeout(30):  # until the whole document is recorded
        while await asyncio.to_thread(sql.value, held) < 1_201:
            await asyncio.sleep(0.05)
    config = EnforcementConfig.from_settings(client.app[SETTINGS])
    for n, mac in enumerate(routers[:2]):  # two networks: not yet
        status, stored = await _report(client, mac, {"lists": {"intel": _list((low, 9))}},
                                       f"47.{n}.0.1")
        assert stored["lists"]["intel"]["entries"] == 1, stored
    await set_figures(db, config, client.app[METRICS])
    assert sql.rows("SELECT kind, networks FROM intel_matched") == []
    await _report(client, routers[2], {"lists": {"intel": _list((low, 9))}}, "47.2.0.1")
    await set_figures(db, EnforcementConfig.from_settings(client.app[SETTINGS]),
                      client.app[METRICS])
    assert sql.rows("SELECT kind, networks FROM intel_matched") == [("ip", 3)]
    async with asyncio.timeout(30):  # the change notified, the documents built again
        while low not in await small():
            await asyncio.sleep(0.1)
    assert len(await small()) == 1_000


async def test_a_removed_router_takes_its_reports_with_it(client, sql):
    await _lists_held(client, sql, MAC, "02:82:00:00:02:02")
    for mac in (MAC, "02:82:00:00:02:02"):
        assert (await _report(client, mac, {"lists": {"fleet": _list((FLEET, 1))}}))[0] == 200
    assert await unsubscribe(client.app[DATABASE], MAC)
    assert sql.rows("SELECT mac::text FROM enforcement_days") == [("02:82:00:00:02:02",)]
    assert sql.rows("SELECT mac::text FROM enforcement_hits") == [("02:82:00:00:02:02",)]


async def test_a_router_is_one_network_however_many_it_reports_from(client, sql):
    """One router reporting an entry from seven /24s over seven days, and a stranger posting
    as it from another address (mac mode): the entry stays at one network, the day at its
    first report's; a zoned address is ignored; an entry counts no more than its list."""
    await _lists_held(client, sql, MAC)
    sql.rows("UPDATE routers SET registered_at = now() - interval '40 days'")
    for day in range(7):
        await _report(client, MAC, {"lists": {"intel": _list((INTEL_IP, 2))}}, f"47.{day}.0.1")
        await _report(client, MAC, {"lists": {"intel": _list()}}, "99.9.9.9")  # a stranger
        for table in ("enforcement_days", "enforcement_hits"):
            sql.rows(f"UPDATE {table} SET day = day - 1")
    assert {row[0] for row in sql.rows("SELECT network::text FROM enforcement_days")} == {
        f"47.{day}.0.0/24" for day in range(7)}
    counted = await effectiveness(client.app[DATABASE], EnforcementConfig.from_settings(
        client.app[SETTINGS]), 30)
    assert [(e.entry, e.networks, e.routers) for e in counted.top] == [(f"{INTEL_IP}/32", 1, 1)]
    assert [(f.feed, f.matched_networks) for f in counted.feeds] == [("f", 1)]
    await set_figures(client.app[DATABASE], EnforcementConfig.from_settings(
        client.app[SETTINGS]), client.app[METRICS])
    assert sql.rows("SELECT * FROM intel_matched") == []  # mac mode: no reordering

    status, stored = await _report(client, MAC, {"lists": {"intel": {
        "packets": 5, "bytes": 500, "entries": [
            {"address": "fe80::%1/64", "packets": 1, "bytes": 1},
            {"address": INTEL_IP, "packets": 10 ** 12, "bytes": 10 ** 12}]}}})
    assert status == 200 and stored["lists"]["intel"] == {
        "entries": 1, "ignored": 1, "over_budget": 0}
    assert sql.rows("SELECT packets, bytes FROM enforcement_hits WHERE day = "
                    "(now() AT TIME ZONE 'UTC')::date") == [(5, 500)]


async def test_an_entry_the_router_own_allowlist_covers_was_never_sent_and_is_ignored(
        client, sql):
    await _lists_held(client, sql, MAC)
    await allowlist_sql.add(client.app[DATABASE], f"{FLEET}/32", MAC, None, "test")
    await allowlist_sql.add(client.app[DATABASE], "81.2.69.0/24", MAC, None, "test")
    status, body = await _report(client, MAC, {"lists": {
        "fleet": _list((FLEET, 2)), "intel": _list((INTEL_IP, 4), (INTEL_NET, 1))}})
    assert status == 200, body
    assert body["lists"]["fleet"] == {"entries": 0, "ignored": 1, "over_budget": 0}
    assert body["lists"]["intel"] == {"entries": 1, "ignored": 1, "over_budget": 0}
    assert sql.rows("SELECT list, text(entry) FROM enforcement_hits") == [
        ("intel", INTEL_NET)]


async def test_a_small_fleet_list_keeps_first_what_matched_at_many_networks(
        make_client, database, tmp_path, sql):
    """The fleet's list trimmed to a router's set keeps first the addresses that matched
    on the routers' firewalls at FLEET_MIN_NETWORKS networks (fleet_matched), then the
    fleet's own evidence: the least reported address comes in once three networks dropped
    it."""
    client = await make_client(settings_for(database, tmp_path, FLEET_MIN_NETWORKS="3",
                                            FLEET_ATTACKERS_IN_MAC_MODE="true",
                                            FLEET_CRON_SCHEDULE="0 0 1 1 *"))
    db = client.app[DATABASE]
    routers = [_mac("02:88", n) for n in range(3)]
    for n, mac in enumerate(routers):
        await _poll(client, mac, f"47.{n}.0.1")
    sql.rows("UPDATE routers SET registered_at = now() - interval '4 days'")
    expires = (datetime.now(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%dT%H:00:00Z")
    common = [f"77.90.{n // 200}.{n % 200 + 1}" for n in range(1_000)]
    low = "77.99.0.1"
    await fleet_db.replace(db, [{**fleet_entry(address), "networks": networks,
                                 "expires_at": expires}
                                for address, networks in [*((a, 10) for a in common),
                                                          (low, 5)]], [])

    async def small() -> set[str]:
        answer = await client.get("/rules/fleet", headers={
            "X-ID": routers[0], "Router-Capacity": "sets=1000"})
        return {entry["address"] for entry in (await answer.json())["entries"]}
    await wait_for(lambda: _fleet_of(client, 1_001), timeout=30, interval=0.05)
    assert low not in await small()  # the least reported: trimmed
    config = EnforcementConfig.from_settings(client.app[SETTINGS])
    for n, mac in enumerate(routers):
        status, stored = await _report(client, mac, {"lists": {"fleet": _list((low, 9))}},
                                       f"47.{n}.0.1")
        assert stored["lists"]["fleet"]["entries"] == 1, stored
        await set_figures(db, config, client.app[METRICS])
        assert sql.rows("SELECT host(address), networks FROM fleet_matched") == (
            [(low, 3)] if n == 2 else [])
    async with asyncio.timeout(30):  # the change notified, the lists built again
        while low not in await small():
            await asyncio.sleep(0.1)
    assert len(await small()) == 1_000


async def _fleet_of(client, entries: int) -> bool:
    return (await client.app[FLEET_LIST].whole.served(MAC)).entries == entries
