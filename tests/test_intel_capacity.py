"""A router says what it can hold of the threat intelligence (Router-Capacity, issue 82): it
gets a document that fits, trimmed to the most confident entries first, with JA4
fingerprints only when its Suricata has JA4; routers of like capacity share one document;
a malformed declaration is a 400 that changes nothing."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

import pytest

from server.intel import sql as intel_db
from server.intel.capacity import Capacity, capacity
from server.polling import sized
from server.polling.capacity import CapacityInvalid
from server.telemetry.indicators import feed_value
from engine.intel import shown
from server.fleet.config import FleetConfig
from server.typedefs import DATABASE, INTEL_LIST, SETTINGS
from testkit.waiting import wait_for

MAC = "02:82:00:00:01:01"
JA4 = "t13d1516h2_8daaf6152771_e5627efa2ab1"


@pytest.mark.parametrize("header,wanted", [
    (None, Capacity(10_000, False)),
    ("datasets=30000, ja4=1", Capacity(30_000, True)),
    ("datasets=5000", Capacity(3_000, False)),
    ("memory=1000000", Capacity(3_000, False)),            # 5,882 entries at 170 bytes
    ("datasets=100000,memory=1000000000", Capacity(100_000, False)),
    ("datasets=999999999999999", Capacity(100_000, False)),  # past every size: the largest
    ("datasets=0", Capacity(0, False)),
    ("ja4=1", Capacity(10_000, True)),
])
def test_a_declaration_names_the_largest_size_that_fits(header, wanted):
    assert capacity(header, 100_000) == wanted


def test_the_operators_cap_bounds_every_size():
    assert capacity("datasets=100000", 20_000) == Capacity(20_000, False)


@pytest.mark.parametrize("header", [
    "datasets=-1", "datasets=abc", "datasets=1e6", "datasets=1, datasets=2", "ja4=2",
    "bogus=1", "datasets=1;memory=2", "datasets=" + "9" * 16, "datasets=1," * 40, "",
    "datasets=\u0661\u0662"])
def test_a_malformed_declaration_is_refused(header):
    with pytest.raises(CapacityInvalid):
        capacity(header, 100_000)


async def _feed(db, rows: list[tuple[str, str, int]]) -> None:
    now = datetime.now(timezone.utc)
    await intel_db.add_feed(db, "f", None, "plain", None, 50, "test")
    taken = [(kind, feed_value(kind, value), confidence, now, now, now + timedelta(days=30))
             for kind, value, confidence in rows]
    await intel_db.swap_version(db, "f", taken, len(taken), {}, None, None, "test")
    async with db.transaction() as cur:  # judged, as a retro-hunt does
        await intel_db.mark_hunted(cur, [(kind, value) for kind, value, *_ in taken])


async def _document(client, header: str | None) -> tuple[int, dict | None, str | None]:
    headers = {"X-ID": MAC, **({"Router-Capacity": header} if header is not None else {})}
    answer = await client.get("/rules/intel", headers=headers)
    return answer.status, await answer.json(), answer.headers.get("ETag")


def _names(document: dict) -> set[str]:
    text = document["files"].get("rb-intel-domains.lst", "")
    return {base64.b64decode(line).decode() for line in text.splitlines()}


async def test_each_router_gets_what_it_can_hold_the_most_confident_first(client, sql):
    rows = [("domain", f"top{n}.capacity.example", 90) for n in range(1_000)]
    rows += [("domain", f"low{n}.capacity.example", 10) for n in range(500)]
    rows.append(("ja4", JA4, 95))
    await _feed(client.app[DATABASE], rows)

    status, small, small_etag = await _document(client, "datasets=1000")
    assert status == 200 and small["entry_count"] == 1_000
    assert _names(small) == {f"top{n}.capacity.example" for n in range(1_000)}
    assert "rb-intel-ja4.lst" not in small["files"] and "ja4.hash" not in small["rules"]

    status, large, _ = await _document(client, "datasets=3000, ja4=1")
    assert status == 200 and large["entry_count"] == 1_501
    assert _names(small) < _names(large)
    assert large["files"]["rb-intel-ja4.lst"].strip() and "ja4.hash" in large["rules"]

    # Saying nothing is the default size, without JA4; the same as saying it.
    status, unsaid, unsaid_etag = await _document(client, None)
    assert status == 200 and unsaid["entry_count"] == 1_500
    assert "rb-intel-ja4.lst" not in unsaid["files"]
    _, _, said_etag = await _document(client, "datasets=10000, ja4=0")
    assert said_etag == unsaid_etag != small_etag

    # The poll names the ETag of the router's own document.
    polled = await client.get("/rules/last_updated",
                              headers={"X-ID": MAC, "Router-Capacity": "datasets=1000"})
    assert (await polled.json())["intel_etag"] == small_etag
    again = await client.get("/rules/intel", headers={
        "X-ID": MAC, "Router-Capacity": "datasets=1000", "If-None-Match": small_etag})
    assert again.status == 304


@pytest.mark.parametrize("header", ["datasets=-5", "datasets=" + "1" * 300, "x=1"])
async def test_a_malformed_declaration_is_a_400_and_changes_nothing(client, sql, header):
    await _feed(client.app[DATABASE], [("domain", "one.capacity.example", 50)])
    assert (await client.get("/rules/last_updated", headers={"X-ID": MAC})).status == 200
    before = sql.rows("SELECT (SELECT count(*) FROM activations), (SELECT count(*) FROM routers)")
    for path in ("/rules/intel", "/rules/last_updated", "/rules/intel?delta=1"):
        answer = await client.get(path, headers={"X-ID": MAC, "Router-Capacity": header})
        assert answer.status == 400, (path, answer.status)
        assert "Router-Capacity" in (await answer.json())["error"]
    after = sql.rows("SELECT (SELECT count(*) FROM activations), (SELECT count(*) FROM routers)")
    assert after == before


async def test_a_router_whose_set_holds_less_keeps_its_addresses_in_the_dataset(client):
    """`sets` smaller than the document: the block entries are the most confident
    addresses that one set holds; every address stays in the `ip` dataset (Suricata still
    alerts on it)."""
    rows = [("ip", _address(n), 90 - n // 100) for n in range(1_500)]  # none adjacent
    rows += [("domain", f"d{n}.capacity.example", 50) for n in range(100)]
    await _feed(client.app[DATABASE], rows)
    status, small, small_etag = await _document(client, "datasets=10000, sets=1000")
    assert status == 200 and small["entry_count"] == 1_600
    assert len(small["block"]) == 1_000
    assert len(small["files"]["rb-intel-ip.lst"].splitlines()) == 1_500
    kept = {entry["address"] for entry in small["block"]}
    assert kept == {_address(n) for n in range(1_000)}  # the most confident
    _, whole, whole_etag = await _document(client, "datasets=10000, sets=65536")
    assert len(whole["block"]) == 1_500 and whole_etag != small_etag


def _address(n: int) -> str:
    return f"62.5.{n // 100}.{n % 100 * 2 + 1}"


async def _new_version(db, rows: list[tuple[str, str, int]]) -> None:
    now = datetime.now(timezone.utc)
    taken = [(kind, feed_value(kind, value), confidence, now, now, now + timedelta(days=30))
             for kind, value, confidence in rows]
    await intel_db.swap_version(db, "f", taken, len(taken), {}, None, None, "test")
    async with db.transaction() as cur:
        await intel_db.mark_hunted(cur, [(kind, value) for kind, value, *_ in taken])


SIZES_ASKED = ("datasets=1000", "datasets=3000", None, "datasets=3000, sets=1000",
               "datasets=1000, ja4=1", "datasets=10000, ja4=1")


async def test_a_change_reads_the_delivery_once_for_every_size_of_a_ja4_choice(
        client, monkeypatch):
    """Six documents held (four without JA4, two with): a change reads the delivery
    statement twice, not six times (a stranger naming every size costs two reads), and
    each document is still the first entries of its choice's."""
    db = client.app[DATABASE]
    rows = [("domain", f"top{n}.capacity.example", 90) for n in range(2_000)]
    await _feed(db, rows)
    for header in SIZES_ASKED:
        assert (await _document(client, header))[0] == 200
    reads, read = [], intel_db.delivered

    async def counted(db, exempt, max_entries, min_age, keyed, left_out=()):
        reads.append((max_entries, left_out))
        return await read(db, exempt, max_entries, min_age, keyed, left_out)

    monkeypatch.setattr(intel_db, "delivered", counted)
    await _new_version(db, [("domain", "new.capacity.example", 99)] + rows[:-1])

    async def every_document_holds_it() -> bool:
        for header in SIZES_ASKED:
            if "new.capacity.example" not in _names((await _document(client, header))[1]):
                return False
        return True

    await wait_for(every_document_holds_it)
    assert {left_out for _, left_out in reads} == {(), ("ja4",)}
    assert {entries for entries, _ in reads} == {10_000}  # the largest held, each time
    # One change (as the feed's notification makes it): two reads for the six documents.
    reads.clear()
    client.app[INTEL_LIST].changed()
    for header in SIZES_ASKED:
        assert (await _document(client, header))[0] == 200
    assert sorted(reads) == [(10_000, ()), (10_000, ("ja4",))]
    # A smaller document is what a read of its own size would have given.
    config = FleetConfig.from_settings(client.app[SETTINGS])
    own = await read(db, list(config.service_networks), 1_000, config.min_age, config.keyed,
                     ("ja4",))
    _, small, _ = await _document(client, "datasets=1000")
    assert small["entry_count"] == 1_000
    assert _names(small) == {shown(kind, value) for kind, value, _ in own}


async def test_a_size_nobody_asked_for_lately_is_dropped_at_a_change(client, monkeypatch):
    db = client.app[DATABASE]
    await _feed(db, [("domain", "one.capacity.example", 50)])
    lists = client.app[INTEL_LIST]
    assert (await _document(client, "datasets=1000"))[0] == 200
    assert (await _document(client, "datasets=3000"))[0] == 200
    assert len(lists.sizes()) == 2
    monkeypatch.setattr(sized, "IDLE_SECONDS", 0.0)
    lists.changed()  # neither asked since: both dropped, neither rebuilt
    assert lists.sizes() == []
    monkeypatch.setattr(sized, "IDLE_SECONDS", 900.0)
    status, document, _ = await _document(client, "datasets=1000")  # asked again: made again
    assert status == 200 and _names(document) == {"one.capacity.example"}
    assert len(lists.sizes()) == 1
    # Dropped at a real change: made again when asked, from a read after the change, not
    # the read its last making shared.
    monkeypatch.setattr(sized, "IDLE_SECONDS", 0.0)
    await _new_version(db, [("domain", "two.capacity.example", 50)])

    async def dropped() -> bool:
        return lists.sizes() == []

    await wait_for(dropped)
    monkeypatch.setattr(sized, "IDLE_SECONDS", 900.0)
    status, document, _ = await _document(client, "datasets=1000")
    assert status == 200 and _names(document) == {"two.capacity.example"}
