"""The fleet's list in numbered versions kept in the database (issue 82): a router asks
what changed since the list it holds (`GET /rules/fleet?delta=1`), any process answers it
after any restart, a version not kept gets the whole list, and the reference agent applies
a delta to its sets and asks the whole list when the delta does not follow its version."""

from __future__ import annotations

import asyncio
import gzip
import orjson
import pytest

from agent.deltas import fleet_applied
from server.db.pool import Database
from server.fleet import sql as fleet_db
from server.fleet.document import FleetList
from server.metrics import Metrics
from server.polling import versioned, versions
from server.typedefs import DATABASE, FLEET_LIST
from tests.test_agent import config_for, run_round, url_of
from tests.test_document_versions import db  # noqa: F401 (the fixture)
from tests.test_fleet_capacity import _entry
from testkit.database import settings_for
from testkit.waiting import wait_for

MAC = "02:82:00:00:03:01"


def _opened(packed: bytes) -> dict:
    return orjson.loads(gzip.decompress(packed))


def _list_of(db: Database, entries: int | None = None) -> FleetList:
    """The list as a process serves it (server/app.py), listening to nothing: each test
    says when it changed."""
    return FleetList(db, lambda: True, Metrics(), True, entries)


async def test_a_process_started_later_answers_a_delta_it_never_built(db, sql):
    await fleet_db.replace(db, [_entry(n) for n in range(100)], [])
    first = _list_of(db)
    held = await first.served(MAC)
    assert await first.recorded(held) == 1
    await fleet_db.replace(db, [_entry(n) for n in range(5, 110)], [])
    first.changed()
    current = await first.served(MAC)
    assert await first.recorded(current) == 2
    restarted = _list_of(db)  # knows nothing of version 1 but what the database keeps
    answer = await restarted.delta(MAC, held.etag)
    assert answer is not None
    delta, etag = answer
    body = _opened(delta.packed)
    assert etag == current.etag and (body["from_serial"], body["serial"]) == (1, 2)
    assert body["remove"] == sorted(_entry(n)["address"] for n in range(5))
    assert [entry["address"] for entry in body["add"]] == [
        _entry(n)["address"] for n in range(100, 110)]
    by_address = lambda entry: entry["address"]  # noqa: E731
    assert sorted(fleet_applied(_opened(held.packed), body)["entries"], key=by_address) == \
        sorted(_opened(current.packed)["entries"], key=by_address)
    assert sql.value("SELECT count(*) FROM document_versions WHERE document = 'fleet'") == 2


async def test_each_size_has_versions_of_its_own(db, sql):
    await fleet_db.replace(db, [_entry(n) for n in range(1_500)], [])
    small, whole = _list_of(db, 1_000), _list_of(db)
    held_small, held_whole = await small.served(MAC), await whole.served(MAC)
    assert (held_small.entries, held_whole.entries) == (1_000, 1_500)
    await small.recorded(held_small)
    await whole.recorded(held_whole)
    assert await whole.delta(MAC, held_small.etag) is None  # another size's version
    assert sql.rows("SELECT document, serial FROM document_versions ORDER BY document") == [
        ("fleet", 1), ("fleet-1000", 1)]


async def test_a_list_mostly_replaced_is_answered_whole_not_as_a_larger_delta(db):
    """Every entry replaced: the delta (each old one removed, each new one added) would
    carry more than the whole list, so the whole list is the answer, asked once or again."""
    await fleet_db.replace(db, [_entry(n) for n in range(200)], [])
    document = _list_of(db)
    held = await document.served(MAC)
    await document.recorded(held)
    await fleet_db.replace(db, [_entry(n) for n in range(1_000, 1_200)], [])
    document.changed()
    current = await document.served(MAC)
    await document.recorded(current)
    assert await document.delta(MAC, held.etag) is None
    assert await document.delta(MAC, held.etag) is None  # the choice kept, not recomputed
    await fleet_db.replace(db, [_entry(n) for n in range(1_000, 1_201)], [])
    document.changed()
    await document.recorded(await document.served(MAC))
    answer = await document.delta(MAC, current.etag)  # one added: a delta again
    assert answer is not None and len(_opened(answer[0].packed)["add"]) == 1


@pytest.mark.parametrize("since", ["not-an-etag", "0" * 64, "x" * 10_000, ""])
async def test_a_delta_from_a_version_not_kept_is_the_whole_list(db, since):
    await fleet_db.replace(db, [_entry(1)], [])
    document = _list_of(db)
    await document.served(MAC)
    assert await document.delta(MAC, since) is None


async def test_over_http_a_delta_or_the_whole_list_as_said(make_client, database, tmp_path):
    client = await make_client(settings_for(database, tmp_path,
                                            FLEET_CRON_SCHEDULE="0 0 1 1 *"))
    db = client.app[DATABASE]
    await fleet_db.replace(db, [_entry(n) for n in range(50)], [])
    whole = client.app[FLEET_LIST].whole

    async def holds(count: int) -> bool:
        return (await whole.served(MAC)).entries == count
    await wait_for(lambda: holds(50), timeout=10, interval=0.05)
    await whole.recorded(await whole.served(MAC))  # numbered (recorded beside the serving)
    first = await client.get("/rules/fleet", headers={"X-ID": MAC})
    etag, serial = first.headers["ETag"], first.headers.get("Document-Serial")
    assert first.status == 200 and serial is not None
    await fleet_db.replace(db, [_entry(n) for n in range(1, 52)], [])
    await wait_for(lambda: holds(51), timeout=10, interval=0.05)
    answer = await client.get("/rules/fleet?delta=1", headers={"X-ID": MAC,
                                                               "If-None-Match": etag})
    body = await answer.json()
    assert answer.status == 200 and body["delta_from"] == etag.removeprefix("W/").strip('"')
    assert body["from_serial"] == int(serial) and body["serial"] == int(serial) + 1
    assert body["remove"] == [_entry(0)["address"]] and len(body["add"]) == 2
    for named in ('"' + "0" * 64 + '"', "garbage", f'{etag}, "other"'):  # not one version
        answer = await client.get("/rules/fleet?delta=1", headers={"X-ID": MAC,
                                                                   "If-None-Match": named})
        assert answer.status == 200 and "delta_from" not in await answer.json()


async def test_the_agent_applies_a_delta_also_after_the_list_came_back_to_its_copy(
        make_client, database, tmp_path):
    client = await make_client(settings_for(database, tmp_path,
                                            FLEET_CRON_SCHEDULE="0 0 1 1 *"))
    db = client.app[DATABASE]
    whole = client.app[FLEET_LIST].whole
    config = config_for(tmp_path, url_of(client), intel=False,
                        firewall_test_command=("true",), firewall_reload_command=("true",))

    async def change(entries: list[dict]) -> None:
        await fleet_db.replace(db, entries, [])

        async def served() -> bool:  # these entries, not merely as many (two lists here are)
            document = orjson.loads(gzip.decompress((await whole.served(config.mac)).packed))
            return {entry["address"] for entry in document["entries"]} == {
                entry["address"] for entry in entries}
        await wait_for(served, timeout=10, interval=0.05)

    def state() -> dict:
        return orjson.loads((config.state_dir / "state.json").read_bytes())["applied"]["fleet"]

    def loaded() -> set[str]:
        return {element for line in config.fleet_path.read_text().splitlines()
                if line.startswith("add element")
                for element in line.split("{ ", 1)[1].rstrip(" }").split(", ")}

    await change([_entry(n) for n in range(20)])
    assert (await run_round(config))[0] == 0 and state()["delta"] is False
    await change([_entry(n) for n in range(2, 25)])
    assert (await run_round(config))[0] == 0 and state()["delta"] is True
    assert loaded() == {_entry(n)["address"] for n in range(2, 25)}
    # The list goes elsewhere and back while the router does not poll: the content it
    # holds comes again under a later number, where the delta starts; it applies.
    held_serial = state()["serial"]
    await change([_entry(n) for n in range(5, 9)])
    await change([_entry(n) for n in range(2, 25)])
    await change([_entry(n) for n in range(3, 30)])
    assert (await run_round(config))[0] == 0 and state()["delta"] is True
    assert state()["serial"] > held_serial + 1
    assert loaded() == {_entry(n)["address"] for n in range(3, 30)}
    # The list kept is another's than the one applied (a stop between the two writes):
    # no delta is applied to it.
    kept_list = config.state_dir / "fleet.json"
    kept_list.write_bytes(orjson.dumps({"etag": "W/\"other\"", "document": {
        "entry_count": 0, "entries": []}}))
    await change([_entry(n) for n in range(4, 31)])
    assert (await run_round(config))[0] == 0 and state()["delta"] is False
    assert loaded() == {_entry(n)["address"] for n in range(4, 31)}
    # A delta that does not apply (the list kept holds an entry that is no address): the
    # whole list is asked and applied at once, not the version marked failed.
    kept = orjson.loads(kept_list.read_bytes())
    kept["document"]["entries"].append({"address": "not-an-address", "family": 4,
                                        "reasons": ["fleet"], "expires_at": None})
    kept_list.write_bytes(orjson.dumps(kept))
    await change([_entry(n) for n in range(5, 32)])
    assert (await run_round(config))[0] == 0 and state()["delta"] is False
    assert loaded() == {_entry(n)["address"] for n in range(5, 32)}
    assert "fleet" not in orjson.loads((config.state_dir / "state.json").read_bytes())["failed"]


async def test_routers_asking_one_delta_at_once_share_its_computation(db, monkeypatch):
    """After a restart every router holding one version asks the same delta at once: one
    read of the versions and one build serve them all; the deltas asked lately are kept,
    the one asked least lately dropped first."""
    reads, read = [], versions.changes_since

    async def counted(db, name, since, serial):
        reads.append(since)
        return await read(db, name, since, serial)

    monkeypatch.setattr(versions, "changes_since", counted)
    monkeypatch.setattr(versioned, "DELTAS_KEPT", 2)
    document, held = _list_of(db), []
    for version in range(4):
        await fleet_db.replace(db, [_entry(n) for n in range(version, 20 + version)], [])
        document.changed()
        served = await document.served(MAC)
        assert await document.recorded(served) == version + 1
        held.append(served.etag)
    answers = await asyncio.gather(*(document.delta(MAC, held[0]) for _ in range(50)))
    assert len(reads) == 1 and len({answer[0].etag for answer in answers}) == 1
    assert _opened(answers[0][0].packed)["from_serial"] == 1
    for since in (held[1], held[2], held[2]):  # the third is kept: no read
        assert await document.delta(MAC, since) is not None
    assert reads == [held[0], held[1], held[2]]
    assert await document.delta(MAC, held[0]) is not None  # dropped, the oldest asked
    assert reads[-1] == held[0] and len(reads) == 4
    # The one asked least lately goes, not the one kept first: held[2], asked again, stays.
    for since in (held[2], held[1], held[2]):
        assert await document.delta(MAC, since) is not None
    assert reads[4:] == [held[1]]

