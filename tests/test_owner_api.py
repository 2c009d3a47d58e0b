"""The owners' API (issue 83): a router's day or week, its alerts and sightings, and "that is
not an attack" marks that take effect for that router at its next poll, undone as they were
done, counted for the fleet by the networks marking a value; and what a stranger, another
owner or a flood of marks gets."""

from __future__ import annotations

import asyncio

import pytest

from server.feedback.config import FeedbackConfig
from server.feedback.marks import rejudged
from server.typedefs import DATABASE
from testkit.database import command_env
from tests.commands import router_backend
from tests.test_console import SUPPORT, sign_in
from tests.test_hunt import dns, upload
from tests.test_intel import house, intel, intel_document, subscriptions  # noqa: F401
from tests.test_intel import feeds  # noqa: F401 (fixture)
from tests.test_notifications import smtp  # noqa: F401 (fixture)
from tests.test_weekly_reports import alert, own, poll, send

HOME, OTHER = "02:85:00:00:00:01", "02:85:00:00:00:02"
NAS, ATTACKER, LAN = "45.60.7.8", "45.33.32.77", "192.168.1.20"
API = "/api/owners/{user}/routers/{mac}"


async def feed_listing(house, *values: str) -> None:
    """A plain feed listing `values`, added and fetched."""
    settings, _, _, served, base = house
    served.bodies["/list.txt"] = (200, "".join(f"{value}\n" for value in values).encode(), {})
    assert (await intel(settings, "add", "list", f"{base}list.txt", "--format",
                        "plain")).returncode == 0
    assert (await intel(settings, "fetch")).returncode == 0


def crowd(prefix: str, n: int) -> str:
    return f"{prefix}:00:00:{n >> 8:02x}:{n & 255:02x}"


def at(user: str, mac: str, tail: str) -> str:
    return API.format(user=user, mac=mac) + tail


async def marked(client, user: str, mac: str, what: str, value: str, note=None):
    answer = await client.post(at(user, mac, "/false-positives"),
                               json={"what": what, "value": value, "note": note})
    return answer.status, await answer.json()


async def homes(client, settings) -> None:
    for router in (HOME, OTHER):
        await poll(client, router)
    own(settings, HOME, "alice")
    own(settings, OTHER, "bob")


async def test_an_owner_reads_their_router_and_nobody_else_does(house, sql):
    settings, client, _, _, _ = house
    await homes(client, settings)
    await send(client, HOME, [alert(ATTACKER, LAN, 2001219, 1, n) for n in range(4)]
               + [alert(NAS, LAN, 2010935, 3, 9)])
    answer = await client.get(at("alice", HOME, "/summary?period=day"))
    assert answer.status == 200
    day = await answer.json()
    assert day["alerts"]["total"] == 5 and day["period"]["name"] == "day"
    assert day["top_remote"][0] == {"address": ATTACKER, "alerts": 4}
    page = await (await client.get(at("alice", HOME, "/alerts?limit=1"))).json()
    assert page["total"] == 2 and len(page["alerts"]) == 1
    assert page["alerts"][0]["src"] == ATTACKER and page["alerts"][0]["count"] == 4
    routers = await (await client.get("/api/owners/alice/routers")).json()
    assert [r["mac"] for r in routers["routers"]] == [HOME]

    # Another owner's router, one that does not exist, a malformed MAC: the same 404.
    for user, mac in (("bob", HOME), ("alice", "02:85:00:00:00:09"), ("alice", "nonsense")):
        for tail in ("/summary", "/alerts", "/sightings", "/false-positives"):
            answer = await client.get(at(user, mac, tail))
            assert answer.status == 404, (user, mac, tail)
            assert "no router" in (await answer.json())["error"]
        status, _ = await marked(client, user, mac, "address", NAS)
        assert status == 404
    assert (await client.get(at("alice", HOME, "/summary?period=year"))).status == 400
    assert (await client.get(at("alice", HOME, "/alerts?limit=1000"))).status == 400
    assert sql.value("SELECT count(*) FROM false_positives") == 0
    assert sql.value("SELECT count(*) FROM firewall_allowlist") == 0


async def test_not_an_attack_takes_effect_for_the_router_at_its_next_poll(house, sql):
    """An address a feed lists, marked by its owner: off the router's document at its next
    poll (and no other's), back when the mark is undone; a signature: an override of the
    router's own; a repeated mark is the one stored; every mark kept with who and when."""
    settings, client, _, served, base = house
    await homes(client, settings)
    await feed_listing(house, NAS, ATTACKER)
    before, _ = await intel_document(client, HOME)
    assert {e["address"] for e in before["block"]} == {NAS, ATTACKER}

    status, body = await marked(client, "alice", HOME, "address", NAS, "my NAS")
    assert status == 201
    first = body["falsePositive"]
    for _ in range(5):
        status, again = await marked(client, "alice", HOME, "address", NAS, "my NAS")
        assert status == 409 and again["falsePositive"]["id"] == first["id"]
        assert "marked already" in again["error"]
    assert sql.rows("SELECT mac::text, network::text, note FROM firewall_allowlist") == [
        (HOME, f"{NAS}/32", "not an attack, says its owner alice: my NAS")]
    after, _ = await intel_document(client, HOME)
    assert {e["address"] for e in after["block"]} == {ATTACKER}
    theirs, _ = await intel_document(client, OTHER)
    assert {e["address"] for e in theirs["block"]} == {NAS, ATTACKER}

    status, body = await marked(client, "alice", HOME, "signature", "2010935")
    assert status == 201
    assert sql.rows("SELECT action, selector, mac::text FROM rule_overrides") == [
        ("disable", "2010935", HOME)]
    listed = await (await client.get(at("alice", HOME, "/false-positives"))).json()
    assert [(m["what"], m["value"]) for m in listed["falsePositives"]] == [
        ("signature", "2010935"), ("address", NAS)]

    answer = await client.delete(at("alice", HOME, f"/false-positives/{first['id']}"))
    assert answer.status == 200
    assert (await client.delete(at("alice", HOME, f"/false-positives/{first['id']}"))
            ).status == 404
    assert (await client.delete(at("bob", HOME, f"/false-positives/{body['falsePositive']['id']}"))
            ).status == 404
    restored, _ = await intel_document(client, HOME)
    assert {e["address"] for e in restored["block"]} == {NAS, ATTACKER}
    assert sql.value("SELECT count(*) FROM firewall_allowlist") == 0
    assert sql.rows("SELECT kind, user_id, unmarked_at IS NOT NULL, unmarked_by "
                    "FROM false_positives ORDER BY id") == [
        ("address", "alice", True, "alice"), ("signature", "alice", False, None)]


async def test_a_sighting_marked_is_closed_and_counted_against_its_feed(house, sql):
    settings, client, _, served, base = house
    await upload(client, HOME, [dns("c2.listed.example")])
    own(settings, HOME, "alice")
    served.bodies["/c2.txt"] = (200, b"c2.listed.example\n", {})
    assert (await intel(settings, "add", "c2", f"{base}c2.txt", "--format",
                        "plain")).returncode == 0
    assert (await intel(settings, "fetch")).returncode == 0
    page = await (await client.get(at("alice", HOME, "/sightings"))).json()
    [sighting] = page["sightings"]
    assert sighting["indicator"] == "c2.listed.example" and sighting["closed"] is None
    status, _ = await marked(client, "alice", HOME, "sighting", sighting["markValue"],
                             "a game's server")
    assert status == 201
    [closed] = (await (await client.get(at("alice", HOME, "/sightings"))).json())["sightings"]
    assert closed["closed"] == "not an attack (its owner)"
    listed = (await intel(settings, "list")).stdout.splitlines()
    assert listed[0].split("\t")[-1] == "not_an_attack" and listed[1].split("\t")[-1] == "1"
    status, _ = await marked(client, "alice", HOME, "sighting", "domain:never.example")
    assert status == 404

    # The console shows the feed's marks beside its sightings, and the router's marks, the
    # owner's note escaped.
    assert (await marked(client, "alice", HOME, "signature", "2013028",
                         "<script>alert(1)</script>"))[0] == 201
    assert (await sign_in(client, SUPPORT)).status == 303
    page = await (await client.get("/console/intel")).text()
    assert "<td>1</td>\n    <td class=\"bad\">1</td>" in page  # sightings, not an attack
    assert "<td>2013028</td><td>1</td>" in page
    page = await (await client.get(f"/console/routers/{HOME}")).text()
    assert "Marked not an attack by its owner (2)" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page


async def test_marks_from_five_networks_hold_a_value_and_one_network_holds_nothing(house, sql):
    """Five owners on five networks mark one address: held for the operator. Forty routers
    of one network, and forty fresh MACs, marking another: nothing held."""
    await five_networks_and_a_crowd(house, sql, 40, 40)


@pytest.mark.drill  # some 2,600 requests
async def test_three_hundred_routers_of_one_network_and_a_thousand_fresh_macs_hold_nothing(
        house, sql):
    await five_networks_and_a_crowd(house, sql, 300, 1000)


async def five_networks_and_a_crowd(house, sql, same: int, fresh: int) -> None:
    settings, client, _, served, base = house
    db = client.app[DATABASE]
    await feed_listing(house, NAS, ATTACKER)

    async def router(mac: str, address: str, user: str) -> None:
        answer = await client.get("/rules/last_updated", headers={
            "X-ID": mac, "X-Forwarded-For": address})
        assert answer.status == 200, await answer.text()
        await db.execute("UPDATE routers SET owner_user = %s, owner_email = %s "
                         "WHERE mac = %s", (user, f"{user}@example.org", mac))

    for n in range(5):
        await router(f"02:86:00:00:00:{n:02x}", f"45.{10 + n}.0.1", f"owner{n}")
    for n in range(same):
        await router(crowd("02:87", n), f"45.99.0.{n % 250 + 1}", f"same{n}")  # one /24
    await db.execute("UPDATE routers SET registered_at = now() - interval '4 days'")
    for n in range(fresh):
        await router(crowd("02:88", n), f"46.{n >> 8}.{n & 255}.1", f"fresh{n}")

    for n in range(4):
        assert (await marked(client, f"owner{n}", f"02:86:00:00:00:{n:02x}", "address",
                             NAS))[0] == 201
    assert sql.value("SELECT count(*) FROM intel_decisions") == 0  # four networks
    assert (await marked(client, "owner4", "02:86:00:00:00:04", "address", NAS))[0] == 201
    assert sql.rows("SELECT kind, value, decision, decided_by FROM intel_decisions") == [
        ("ip", NAS, "held", "owners")]
    for prefix, user, count in (("02:87", "same", same), ("02:88", "fresh", fresh)):
        for n in range(count):
            status, _ = await marked(client, f"{user}{n}", crowd(prefix, n), "address",
                                     ATTACKER)
            assert status == 201
    assert sql.rows("SELECT value FROM intel_decisions") == [(NAS,)]
    decisions = (await intel(settings, "decisions")).stdout
    assert "marked not an attack by owners on 5 networks" in decisions
    for n in range(5):
        await marked(client, f"owner{n}", f"02:86:00:00:00:{n:02x}", "signature", "2013028")
    for n in range(same):
        await marked(client, f"same{n}", crowd("02:87", n), "signature", "2013029")
    shown = await asyncio.to_thread(router_backend, command_env(settings), "feedback")
    assert shown.returncode == 0, shown.stderr
    assert "2013028\t5\t5\tyes" in shown.stdout
    assert f"2013029\t{same}\t1\tno" in shown.stdout
    assert f"ip\t{NAS}\tmarked not an attack by owners on 5 networks" in shown.stdout

    undone = sql.value("SELECT id FROM false_positives WHERE user_id = 'owner0' "
                       "AND kind = 'address'")
    assert (await client.delete(at("owner0", "02:86:00:00:00:00",
                                   f"/false-positives/{undone}"))).status == 200
    assert sql.value("SELECT count(*) FROM intel_decisions") == 0  # four networks
    assert (await marked(client, "owner0", "02:86:00:00:00:00", "address", NAS))[0] == 201
    assert sql.value("SELECT count(*) FROM intel_decisions") == 1
    # Routers removed: the next judgement (the false-positive-holds job) lifts the hold.
    for n in (3, 4):
        assert subscriptions(settings, "remove", f"02:86:00:00:00:{n:02x}").returncode == 0
    assert sql.value("SELECT count(*) FROM intel_decisions") == 1
    await rejudged(db, FeedbackConfig.from_settings(settings))
    assert sql.value("SELECT count(*) FROM intel_decisions") == 0


async def test_hostile_marks_get_a_clear_answer_and_change_nothing(house, sql):
    settings, client, _, _, _ = house
    await homes(client, settings)
    bad = [({"what": "address", "value": "x" * 10_000}, 400),
           ({"what": "address", "value": "10.0.0.0/8"}, 400),
           ({"what": "signature", "value": "1; DROP TABLE routers"}, 400),
           ({"what": "sighting", "value": "domain:" + "a" * 400}, 400),
           ({"what": "everything", "value": NAS}, 400),
           ({"what": "address", "value": NAS, "note": "line\r\nBcc: x@example.org"}, 400),
           ({"what": "address", "value": NAS, "note": "n" * 501}, 400),
           ({"what": "address", "value": 7}, 400),
           ([1, 2], 400)]
    for body, status in bad:
        answer = await client.post(at("alice", HOME, "/false-positives"), json=body)
        assert answer.status == status, (body, await answer.text())
        assert "error" in await answer.json()
    answer = await client.post(at("alice", HOME, "/false-positives"), data=b"{not json")
    assert answer.status == 400
    assert sql.value("SELECT count(*) FROM false_positives") == 0

    # One mark sent 300 times at once: stored once, one allowlist entry.
    answers = await asyncio.gather(*(marked(client, "alice", HOME, "address", NAS)
                                     for _ in range(300)))
    assert sorted({status for status, _ in answers}) == [201, 409]
    assert len({body["falsePositive"]["id"] for _, body in answers}) == 1
    assert sql.value("SELECT count(*) FROM false_positives") == 1
    assert sql.value("SELECT count(*) FROM firewall_allowlist") == 1

    # A router's marks of a day are bounded (50 by default), even sent all at once.
    answers = await asyncio.gather(*(marked(client, "alice", HOME, "signature",
                                            str(2_100_000 + n)) for n in range(120)))
    statuses = [status for status, _ in answers]
    assert statuses.count(201) == 49 and statuses.count(429) == 71
    assert "marks of the last day" in next(b for s, b in answers if s == 429)["error"]
    assert sql.value("SELECT count(*) FROM rule_overrides") == 49
    assert sql.value("SELECT count(*) FROM false_positives") == 50
    # Every live mark is in force: the address's allowlist entry is the one stored.
    assert sql.value("SELECT count(*) FROM false_positives f JOIN firewall_allowlist a "
                     "ON a.id = f.effect WHERE f.kind = 'address'") == 1
    # bob's router is not held back by alice's.
    assert (await marked(client, "bob", OTHER, "signature", "2200000"))[0] == 201


async def test_an_owner_chooses_their_weekly_report_through_the_api(house, sql):
    settings, client, _, _, _ = house
    await homes(client, settings)
    answer = await client.put("/api/owners/alice/weekly-report",
                              json={"at": "fri 17:00", "zone": "America/New_York"})
    assert answer.status == 200
    assert await answer.json() == {"weekly": True, "at": "fri 17:00 America/New_York"}
    answer = await client.put("/api/owners/alice/weekly-report", json={"weekly": False})
    assert (await answer.json())["weekly"] is False
    for body in ({"zone": "Nowhere/City"}, {"at": "fri 25:00"}, {"weekly": "no"}):
        answer = await client.put("/api/owners/alice/weekly-report", json=body)
        assert answer.status == 400, body
    answer = await client.put("/api/owners/mallory/weekly-report", json={"weekly": False})
    assert answer.status == 404
    assert sql.rows("SELECT user_id, weekly, weekday, hour, zone FROM owner_reports") == [
        ("alice", False, 5, 17, "America/New_York")]


async def test_a_removed_routers_marks_end_and_their_record_stays(house, sql):
    settings, client, _, _, _ = house
    await homes(client, settings)
    assert (await marked(client, "alice", HOME, "address", NAS))[0] == 201
    assert subscriptions(settings, "remove", HOME).returncode == 0
    assert sql.rows("SELECT user_id, unmarked_by FROM false_positives") == [
        ("alice", "router removed")]
    assert sql.value("SELECT count(*) FROM firewall_allowlist") == 0


async def test_an_owner_weighs_one_network_and_no_value_is_held_before_a_feed_names_it(
        house, sql):
    """The red team's: one owner polling five routers from five networks held a value (each
    owner now counts one network); five owners marking an address no feed lists and none
    of their routers saw held it before any feed named it (such a mark counts for nothing
    in the fleet: it is the router's alone)."""
    settings, client, _, served, base = house
    db = client.app[DATABASE]
    await feed_listing(house, NAS)
    for n in range(10):
        mac = crowd("02:89", n)
        answer = await client.get("/rules/last_updated", headers={
            "X-ID": mac, "X-Forwarded-For": f"47.{n}.0.1"})
        assert answer.status == 200
        user = "mallory" if n < 5 else f"owner{n}"
        await db.execute("UPDATE routers SET owner_user = %s, owner_email = %s, "
                         "registered_at = now() - interval '4 days' WHERE mac = %s",
                         (user, f"{user}@example.org", mac))
    for n in range(5):
        assert (await marked(client, "mallory", crowd("02:89", n), "address", NAS))[0] == 201
        assert (await marked(client, f"owner{n + 5}", crowd("02:89", n + 5), "address",
                             "45.99.99.99"))[0] == 201
    assert sql.value("SELECT count(*) FROM intel_decisions") == 0
    assert sql.value("SELECT count(*) FROM firewall_allowlist") == 10  # each router's own


async def test_a_new_owner_neither_sees_nor_inherits_the_previous_owners_marks(house, sql):
    settings, client, _, _, _ = house
    await homes(client, settings)
    assert (await marked(client, "alice", HOME, "address", NAS, "my vpn"))[0] == 201
    assert (await marked(client, "alice", HOME, "signature", "2010935"))[0] == 201
    own(settings, HOME, "carol")
    listed = await (await client.get(at("carol", HOME, "/false-positives"))).json()
    assert listed == {"falsePositives": [], "total": 0}
    assert sql.value("SELECT count(*) FROM firewall_allowlist") == 0
    assert sql.value("SELECT count(*) FROM rule_overrides") == 0
    assert sql.rows("SELECT DISTINCT unmarked_by FROM false_positives") == [("owner changed",)]
    summary = await (await client.get(at("carol", HOME, "/summary"))).json()
    assert summary["last_contact"] is None  # alice's poll is not carol's to be told


async def test_what_the_second_review_found_stays_mended(house, sql):
    """A sighting's mark and its address's share one allowlist entry, kept while either is
    live; a mark id written in other digits is a 400; a MAC removed and subscribed again
    shows its new owner nothing of its earlier subscription."""
    settings, client, _, served, base = house
    await upload(client, HOME, [{"event_type": "flow", "src_ip": LAN, "dest_ip": ATTACKER,
                                 "proto": "TCP"}])
    await poll(client, HOME)
    own(settings, HOME, "alice")
    await feed_listing(house, ATTACKER)
    status, sighting = await marked(client, "alice", HOME, "sighting", f"ip:{ATTACKER}")
    assert status == 201
    assert (await marked(client, "alice", HOME, "address", ATTACKER))[0] == 201
    mark_id = sighting["falsePositive"]["id"]
    assert (await client.delete(at("alice", HOME, f"/false-positives/{mark_id}"))).status == 200
    assert sql.value("SELECT count(*) FROM false_positives f JOIN firewall_allowlist a "
                     "ON a.id = f.effect WHERE f.unmarked_at IS NULL") == 1
    assert (await client.delete(at("alice", HOME, "/false-positives/%C2%B2"))).status == 400

    sql.rows(f"INSERT INTO telemetry_alerts (mac, hour, src_ip, dest_ip, signature_id, "
             f"severity, alerts, last_seen, flow_ids) VALUES ('{HOME}', date_trunc('hour', "
             f"now()) - interval '3 hours', '{ATTACKER}', '{LAN}', 2001219, 1, 7, now(), "
             "'{}')")  # the earlier subscription's (summaries stay until retention)
    assert subscriptions(settings, "remove", HOME).returncode == 0
    assert subscriptions(settings, "add", HOME, "--user", "newbie", "--email",
                         "newbie@example.org").returncode == 0
    summary = await (await client.get(at("newbie", HOME, "/summary"))).json()
    assert summary["alerts"]["total"] == 0 and summary["last_contact"] is None
