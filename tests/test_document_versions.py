"""The threat intelligence document's versions, numbered in the database (issue 82): a
delta from any version kept is answered by any process, one started after the version was
served included (a restart, another host), and is exactly the change; a version unknown,
of another document, pruned or later than the one served gets the whole document. And the
values of one fetch do not expire together."""

from __future__ import annotations

import base64
from collections import Counter
from datetime import datetime, timedelta, timezone

import orjson
import gzip
import pytest

from agent.deltas import follows
from agent.intel import applied
from engine.intel import items
from server.db.pool import Database
from server.intel import sql as intel_db
from server.intel.capacity import Capacity
from server.intel.document import DeliveredRows, IntelList
from server.intel.feeds import rows
from server.intel.formats import Version
from server.polling import versions
from server.telemetry.indicators import feed_value

MAC = "02:82:00:00:00:01"
LARGEST = Capacity(100_000, False)
# What stays in the list across the tests' versions: a delta smaller than the whole list,
# which is what a router is answered instead (server/polling/versioned.py).
UNCHANGED = [f"kept{n}.example" for n in range(40)]


def _document_of(db: Database) -> IntelList:
    """The document as a process serves it (server/app.py), listening to nothing: every
    test says when it changed."""
    return IntelList(db, lambda: True, DeliveredRows(db, [], timedelta(hours=72), False),
                     LARGEST)


async def _feed(db: Database, names: list[str]) -> None:
    now = datetime.now(timezone.utc)
    if not await intel_db.feeds(db, "f"):
        await intel_db.add_feed(db, "f", None, "plain", "domain", 50, "test")
    rows = [("domain", feed_value("domain", name), 50, now, now, now + timedelta(days=30))
            for name in names]
    await intel_db.swap_version(db, "f", rows, len(rows), {}, None, None, "test")
    async with db.transaction() as cur:  # judged, as a retro-hunt does: delivered from now
        await intel_db.mark_hunted(cur, [(kind, value) for kind, value, *_ in rows])


def _opened(packed: bytes) -> dict:
    return orjson.loads(gzip.decompress(packed))


def _names(lines: list[str]) -> list[str]:
    return sorted(base64.b64decode(line).decode() for line in lines)


@pytest.fixture
async def db(database):
    pool = await Database.open(database, 0, 4, 30)
    yield pool
    await pool.close()


async def test_a_process_started_later_answers_a_delta_from_a_version_it_never_built(db, sql):
    await _feed(db, UNCHANGED + ["one.example", "two.example"])
    first = _document_of(db)
    held = await first.served(MAC)
    assert await first.recorded(held) == 1
    await _feed(db, UNCHANGED + ["two.example", "three.example"])
    first.changed()
    current = await first.served(MAC)
    assert await first.recorded(current) == 2
    # A restart: a new process knows nothing of version 1 but what the database keeps.
    restarted = _document_of(db)
    answer = await restarted.delta(MAC, held.etag)
    assert answer is not None
    delta, etag = answer
    assert etag == current.etag == (await restarted.served(MAC)).etag
    body = _opened(delta.packed)
    assert (body["delta_from"], body["from_serial"], body["serial"]) == (held.etag, 1, 2)
    files = body["files"]["rb-intel-domains.lst"]
    assert _names(files["add"]) == ["three.example"]
    assert _names(files["remove"]) == ["one.example"]
    # Equal versions recorded once: the second process found version 2 recorded.
    assert sql.value("SELECT count(*) FROM document_versions") == 2


async def test_a_delta_over_many_versions_is_their_change_composed(db):
    names = [f"n{n}.example" for n in range(6)]
    document = _document_of(db)
    await _feed(db, UNCHANGED + names[:3])
    start = await document.served(MAC)
    for step in range(1, 4):  # one name in, one out, each version; one back in at the end
        await _feed(db, UNCHANGED + names[step:step + 3]
                    + (["n0.example"] if step == 3 else []))
        document.changed()
        await document.served(MAC)
    answer = await _document_of(db).delta(MAC, start.etag)
    body = _opened(answer[0].packed)
    assert body["from_serial"] == 1 and body["serial"] == 4
    files = body["files"]["rb-intel-domains.lst"]
    assert _names(files["add"]) == ["n3.example", "n4.example", "n5.example"]
    assert _names(files["remove"]) == ["n1.example", "n2.example"]
    # The agent's application of it to the start gives the document served now.
    assert applied(_opened(start.packed), body) == _opened((await document.served(MAC)).packed)


@pytest.mark.parametrize("since", ["not-an-etag", "0" * 64, "x" * 10_000, ""])
async def test_a_delta_from_a_version_not_kept_is_the_whole_document(db, since):
    await _feed(db, ["one.example"])
    document = _document_of(db)
    await document.served(MAC)
    assert await document.delta(MAC, since) is None


async def test_a_delta_from_a_version_later_than_the_one_served_is_the_whole_document(db):
    await _feed(db, ["one.example"])
    stale = _document_of(db)
    await stale.served(MAC)
    await _feed(db, ["one.example", "two.example"])
    fresh = _document_of(db)
    later = await fresh.served(MAC)
    assert await fresh.recorded(later) == 2
    # The stale process has not heard of the change: a router holding version 2 asking it
    # gets its whole (older) document, never a delta that goes backwards.
    assert await stale.delta(MAC, later.etag) is None


async def test_a_process_whose_state_is_older_than_the_latest_never_records_over_it(db, sql):
    await _feed(db, ["one.example"])
    older = _document_of(db)
    made_at = datetime.now(timezone.utc) - timedelta(minutes=1)
    assert await versions.record(db, LARGEST.name, "later-etag", {("x", "y")}, 1,
                                 datetime.now(timezone.utc)) == 1
    assert await versions.record(db, LARGEST.name, "older-etag", {("x", "z")}, 1,
                                 made_at) is None
    assert sql.rows("SELECT serial, etag FROM document_versions") == [(1, "later-etag")]
    assert sql.rows("SELECT place, item, until_serial FROM document_items") == [
        ("x", "y", None)]
    served = await older.served(MAC)  # read now: newer than the latest, so recorded
    assert await older.recorded(served) == 2


async def test_versions_older_than_a_week_are_pruned_with_the_items_gone_before_them(db, sql):
    long_ago = datetime.now(timezone.utc) - timedelta(days=versions.KEPT_DAYS + 1)
    await versions.record(db, "intel", "a", {("f", "1"), ("f", "2")}, 2, long_ago)
    await versions.record(db, "intel", "b", {("f", "2")}, 1, long_ago + timedelta(hours=1))
    await versions.record(db, "intel", "c", {("f", "2"), ("f", "3")}, 2,
                          datetime.now(timezone.utc))
    # Versions a and b are past the week; the latest is kept whatever its age.
    assert sql.rows("SELECT serial FROM document_versions ORDER BY 1") == [(3,)]
    assert sql.rows("SELECT item, since_serial, until_serial FROM document_items "
                    "ORDER BY item") == [("2", 1, None), ("3", 3, None)]
    assert await versions.changes_since(db, "intel", "a", 3) is None


async def test_items_of_a_version_are_what_its_document_holds(db):
    await _feed(db, ["one.example", "two.example"])
    document = _document_of(db)
    served = await document.served(MAC)
    whole = _opened(served.packed)
    assert len(items(whole)) == whole["entry_count"] == 2


@pytest.mark.parametrize("delta,held,taken", [
    ({"delta_from": "abc", "from_serial": 3}, {"etag": 'W/"abc"', "serial": 3}, True),
    # the same content numbered again (a list back to an earlier state): the same list
    ({"delta_from": "abc", "from_serial": 3}, {"etag": '"abc"', "serial": 2}, True),
    ({"delta_from": "abc", "from_serial": 3}, {"etag": '"abd"', "serial": 3}, False),
    ({"delta_from": "abc"}, {"etag": '"abc"', "serial": 3}, True),  # a server of before
    ({"delta_from": "abc", "from_serial": 3}, {"etag": '"abc"'}, True),  # an agent of before
])
def test_the_agent_takes_a_delta_only_from_the_content_it_holds(delta, held, taken):
    assert follows(delta, held) is taken


def test_the_values_of_one_fetch_expire_over_days_not_at_once():
    """A plain feed gives no expiry: its 1,000 addresses, all seen by the fetch now, expire
    between 30 and 45 days from now, no day taking more than a tenth of them (a feed that
    stops answering leaves the document over days); a value's expiry is its own at every
    fetch, and a feed's own expiry is kept."""
    now = datetime.now(timezone.utc)
    version = Version()
    for n in range(1_000):
        version.add("ip", f"45.{n >> 8}.{n & 255}.9")
    version.add("ip", "45.99.0.1", expires_at=now + timedelta(days=3))
    taken = rows(version, 50, now)
    lives = [(expires - now) / timedelta(days=1) for *_, expires in taken]
    given = lives.pop()
    assert given == pytest.approx(3)
    assert 30 <= min(lives) and max(lives) < 45
    per_day = Counter(int(life) for life in lives)
    assert len(per_day) == 15 and max(per_day.values()) <= 100
    assert rows(version, 50, now) == taken
