"""A delta's removals as places (`?delta=2`, engine/places.py): the agent reaches the same
document as the whole one, a removal costs a digit or two instead of its value, a place
that names nothing held makes the agent ask the whole document, and any other `delta`
than 1 or 2 is answered whole."""

from __future__ import annotations

import gzip
import ipaddress
import random

import orjson
import pytest

from agent.deltas import fleet_applied, removed_at
from agent.intel import applied
from engine.fleet import fleet_delta, fleet_document, fleet_items
from engine.intel import changes, delta_document, intel_document
from engine.places import removed_places
from server.fleet import sql as fleet_db
from server.typedefs import DATABASE, FLEET_LIST
from tests.test_fleet_capacity import _entry
from testkit.database import settings_for
from testkit.waiting import wait_for

MAC = "02:82:00:00:05:01"
EXPIRY = "2026-12-09T10:00:00Z"


def _domains(count: int, seed: int) -> list[str]:
    pick = random.Random(seed)
    return [f"{pick.getrandbits(40):x}.{pick.choice(['com', 'net', 'top'])}"
            for _ in range(count)]


def _intel(domains: list[str], addresses: list[str], expiry: str = EXPIRY) -> dict:
    return intel_document([{"kind": "domain", "value": name, "expires_at": None}
                           for name in domains]
                          + [{"kind": "ip", "value": address, "expires_at": expiry}
                             for address in addresses])


def _addresses(first: int, count: int) -> list[str]:
    return [str(ipaddress.IPv4Address("45.33.0.1") + n) for n in range(first, first + count)]


def _packed(document: dict) -> int:
    return len(gzip.compress(orjson.dumps(document)))


def test_removals_by_place_lead_to_the_whole_document_and_cost_less_than_by_name():
    old_names, new_names = _domains(5_000, 1), _domains(50, 2)
    kept = old_names[50:]
    old = _intel(old_names, _addresses(0, 400) + ["2600:3c01::f03c:91ff:fe18:bb2f"])
    new = _intel(kept + new_names, _addresses(4, 400))
    moved = _intel(kept + new_names, _addresses(4, 400), "2026-12-10T10:00:00Z")
    for target in (new, moved):  # (every block entry's expiry moved: removed, added again)
        added, removed = changes(old, target)
        by_place = delta_document("e", target, added, removed, (1, 2), places=True)
        by_name = delta_document("e", target, added, removed, (1, 2))
        assert "remove" not in by_place["block"] and "remove_at" in by_place["block"]
        assert all("remove_at" in change for change in by_place["files"].values())
        for delta in (by_place, by_name):
            reached = applied(old, delta)
            assert reached["files"] == target["files"]
            assert sorted(reached["block"], key=str) == sorted(target["block"], key=str)
        assert _packed(by_place) < _packed(by_name)
    added, removed = changes(old, new)
    files = delta_document("e", new, added, removed, places=True)["files"]
    for name, change in files.items():  # the last place within the file held
        assert 0 < sum(change["remove_at"]) <= len(old["files"][name].splitlines())


def test_the_fleets_removals_by_place_lead_to_its_whole_list():
    old = fleet_document([_entry(n) for n in range(300)])
    attackers = [_entry(n) for n in range(7, 310)]
    attackers[100] = {**attackers[100], "expires_at": "2026-12-30T00:00:00+00:00"}
    new = fleet_document(attackers)
    assert new["entry_count"] == 303
    before, after = fleet_items(old), fleet_items(new)
    delta = fleet_delta("e", new, after - before, before - after, (3, 4), places=True)
    assert "remove" not in delta and len(delta["remove_at"]) == 8  # 7 gone, 1 moved
    by_address = lambda entry: entry["address"]  # noqa: E731
    assert sorted(fleet_applied(old, delta)["entries"], key=by_address) == \
        sorted(new["entries"], key=by_address)


@pytest.mark.parametrize("places", [[0], [-1], [True], [1.0], ["1"], [3, 1], [None]])
def test_a_place_naming_nothing_held_is_refused(places):
    with pytest.raises(ValueError):
        removed_at(["b", "a", "c"], places)


def test_places_are_those_in_the_whole_version_held_sorted():
    rng = random.Random(82)
    for _ in range(200):
        held = sorted({rng.choice("aAbB.-0") * rng.randint(1, 4) for _ in range(30)})
        removed = rng.sample(held, rng.randint(0, len(held)))
        added = sorted({rng.choice("cC_") * rng.randint(1, 4) for _ in range(5)})
        now = sorted([item for item in held if item not in removed] + added)
        where = sorted(held.index(item) for item in removed)
        assert removed_places(now, added, removed) == [
            place - before for before, place in zip([-1, *where], where)]
        assert removed_at(held, removed_places(now, added, removed)) == set(removed)


def test_places_count_in_code_point_order_of_what_is_held():
    held = ["b.example", "A.example", "a.example", "c.example"]
    assert removed_places(["A.example", "b.example"], (), ["a.example", "c.example"]) == [2, 2]
    assert removed_places(["b.example", "d"], ["d"], ["c.example", "A.example", "a.example"]
                          ) == [1, 1, 2]
    assert removed_at(held, [2, 2]) == {"a.example", "c.example"}
    with pytest.raises(ValueError):  # the same item twice: no place names one of them
        removed_at(["a", "a"], [1])


async def test_over_http_removals_by_place_and_other_forms_whole(make_client, database,
                                                                 tmp_path):
    client = await make_client(settings_for(database, tmp_path,
                                            FLEET_CRON_SCHEDULE="0 0 1 1 *"))
    db = client.app[DATABASE]
    await fleet_db.replace(db, [_entry(n) for n in range(50)], [])
    whole = client.app[FLEET_LIST].whole

    async def holds(count: int) -> bool:
        return (await whole.served(MAC)).entries == count
    await wait_for(lambda: holds(50), timeout=10, interval=0.05)
    await whole.recorded(await whole.served(MAC))
    first = await client.get("/rules/fleet", headers={"X-ID": MAC})
    etag, held = first.headers["ETag"], await first.json()
    await fleet_db.replace(db, [_entry(n) for n in range(1, 52)], [])
    await wait_for(lambda: holds(51), timeout=10, interval=0.05)
    answer = await client.get("/rules/fleet?delta=2", headers={"X-ID": MAC,
                                                               "If-None-Match": etag})
    body = await answer.json()
    assert answer.status == 200 and body["remove_at"] == [1] and "remove" not in body
    current = await (await client.get("/rules/fleet", headers={"X-ID": MAC})).json()
    reached = fleet_applied(held, body)
    assert reached["entry_count"] == current["entry_count"] == 51
    assert sorted(map(str, reached["entries"])) == sorted(map(str, current["entries"]))
    for form in ("3", "0", "2 ", "x" * 1_000, ""):
        answer = await client.get("/rules/fleet", params={"delta": form},
                                  headers={"X-ID": MAC, "If-None-Match": etag})
        assert answer.status == 200 and "delta_from" not in await answer.json()
