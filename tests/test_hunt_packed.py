"""The packed hunt index (issue 59): hunts answer the same before and after packing, with
postings in rows and in blocks at once; the earliest sighting first, each indicator in turn,
so that no flood of later routers (the burying attacks) pushes an honest router off the
first page; pages; hunts of many indicators; a removed router named by no hunt; packed days
expired by retention. Packing is asked with `before` tomorrow, which packs today too: the
same code path as the job's, without ageing rows (which Citus refuses)."""

from __future__ import annotations

import asyncio
import random
import re
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from server.hunt.sql import INTEGER_MAX, NETWORKS_KEPT, postings_statement, unindexed_statement
from server.removal import unsubscribe
from server.hunt import indexer, tallies
from server.hunt.budget import HuntBudget
from server.hunt.indexer import index_pending
from server.hunt.search import Hunt, run_hunt
from server.hunt.sightings import sightings
from server.jobs.retention import run_retention
from server.hunt.packing import pack
from server.telemetry.indicators import indicator
from server.hunt.postings import (POSTINGS_FREE, POSTINGS_PER_ROUTER_DAY, TRIPLES_ANNOUNCED,
                                  Postings, PendingUpload)
from server.hunt.sql import ADD_PENDING
from server.typedefs import DATABASE, ROUTER_REGISTRY, SETTINGS
from testkit.database import command_env
from testkit.waiting import wait_for
from tests.commands import router_backend
from tests.test_console import SUPPORT, console_settings, sign_in
from tests.test_hunt import (corpus_records, dns, expected, fleet, hunt, indexed,  # noqa: F401
                             mac, upload)

TOMORROW = timedelta(days=1)


def tomorrow() -> datetime:
    return datetime.now(timezone.utc).replace(hour=0, minute=0, second=0,
                                              microsecond=0) + TOMORROW


def shape(answer: dict) -> list[tuple]:
    return [(m["mac"], m["kind"], m["indicator"], m["first_seen"], m["last_seen"],
             m["records"], tuple(m["days"])) for m in answer["matches"]]


async def test_hunts_answer_the_same_before_and_after_packing(fleet, sql):  # noqa: F811
    settings, client, held = fleet
    truth = expected(held)
    rng = random.Random(59)
    asked = rng.sample(sorted(truth), 40)
    db = client.app[DATABASE]

    async def answers() -> list[dict]:
        return [await run_hunt(db, Hunt((indicator(kind, value),), 30), "test", "command",
                               None) for kind, value in asked]

    before = await answers()
    for (kind, value), answer in zip(asked, before):
        assert {m["mac"]: m["records"] for m in answer["matches"]} == truth[(kind, value)]
    rows = sql.value("SELECT count(*) FROM hunt_postings")
    done = (await pack(db, tomorrow())).as_detail()
    assert done["postings"] == rows and sql.value("SELECT count(*) FROM hunt_postings") == 0
    assert done["bytes"] < rows * 40  # (the corpus's few routers: the values' hashes dominate)
    after = await answers()
    assert [shape(a) for a in after] == [shape(b) for b in before]
    assert [a["match_count"] for a in after] == [b["match_count"] for b in before]
    # A router uploads again: its new postings in rows, its old ones in blocks, one match.
    kind, value = next(k for k in asked if k[0] == "sid")
    router = sorted(truth[(kind, value)])[0]
    again = [r for r in held[router] if (r.get("alert") or {}).get("signature_id") == int(value)]
    await upload(client, router, again)
    answer = await run_hunt(db, Hunt((indicator(kind, value),), 30), "test", "command", None)
    records = {m["mac"]: m["records"] for m in answer["matches"]}
    assert records[router] == 2 * truth[(kind, value)][router]
    assert answer["match_count"] == len(truth[(kind, value)])
    await pack(db, tomorrow())  # packed again: a second pass of the same day
    again_packed = await run_hunt(db, Hunt((indicator(kind, value),), 30), "test", "command",
                                  None)
    assert shape(again_packed) == shape(answer)
    assert sql.value("SELECT count(DISTINCT pass) FROM hunt_packed") == 2


async def test_the_command_packs_the_days_before_today(make_client, settings, sql):
    client = await make_client(settings)
    db = client.app[DATABASE]
    await upload(client, mac(8), [dns("today.example")])
    yesterday = datetime.now(timezone.utc) - TOMORROW
    await plant(db, [mac(9)], ["yesterday.example"], yesterday)
    done = router_backend(command_env(settings), "hunt", "compact")
    assert done.returncode == 0, done.stderr
    assert f"packed 1 day(s), {yesterday.date()} to {yesterday.date()}" in done.stdout
    assert sql.value("SELECT count(*) FROM hunt_postings WHERE mac = %s", (mac(9),)) == 0
    assert sql.value("SELECT count(*) FROM hunt_postings WHERE mac = %s", (mac(8),)) > 0
    again = router_backend(command_env(settings), "hunt", "compact")
    assert "nothing to pack" in again.stdout
    answer = hunt(settings, "--domain", "yesterday.example")
    assert [(m["mac"], m["days"]) for m in answer["matches"]] == [
        (mac(9), [yesterday.date().isoformat()])]


async def plant(db, macs: list[str], names: list[str | dict], seen: datetime) -> None:
    """Postings as an upload of `names` (DNS queries, or records as they are) from each
    router writes them, through the service's own statement (server/hunt/sql.py), at
    `seen`, each router registered first."""
    for router in macs:  # registered, as an upload registers its router
        await db.execute("INSERT INTO routers (mac) VALUES (%s) ON CONFLICT DO NOTHING",
                         (router,))
        postings = Postings()
        for name in names:
            postings.add(name if isinstance(name, dict) else dns(name))
        await db.execute(postings_statement({**postings.params(seen), "mac": router,
                                             "budget": POSTINGS_PER_ROUTER_DAY}))


def sybils(prefix: str, count: int) -> list[str]:
    """`count` MACs under a prefix of four octets: an attacker's cheap routers."""
    return [f"{prefix}:{n >> 8:02x}:{n & 255:02x}" for n in range(count)]


async def plant_later(db, macs: list[str], names: list[str]) -> None:
    """`names` planted from `macs` two seconds after now (skipped too close to midnight,
    where that would be another day)."""
    later = datetime.now(timezone.utc) + timedelta(seconds=2)
    if later.date() != datetime.now(timezone.utc).date():
        pytest.skip("too close to midnight")
    await plant(db, macs, names, later)


@pytest.mark.parametrize("packed", [False, True])
async def test_a_thousand_later_routers_do_not_bury_the_first(make_client, settings, packed):
    """1,050 MACs post a name after an honest router did (issue 59): the honest router is
    the first match, on the first page of the command's default limit, packed or not."""
    client = await make_client(settings)
    db = client.app[DATABASE]
    await upload(client, mac(1), [dns("www.evil-c2.example")])
    await plant_later(db, sybils("02:00:00:00", 1050), ["www.evil-c2.example"])
    if packed:
        await pack(db, tomorrow())
    answer = hunt(settings, "--domain", "evil-c2.example")
    assert answer["match_count"] == 1051 and answer["match_count_exact"]
    assert answer["matches"][0]["mac"] == mac(1)
    first_page = router_backend(command_env(settings), "hunt", "--domain", "evil-c2.example")
    assert first_page.returncode == 0
    assert first_page.stdout.splitlines()[2].startswith(mac(1))
    assert "more with --offset 1000" in first_page.stdout
    page = hunt(settings, "--domain", "evil-c2.example", "--offset", "1050")
    assert page["shown"] == 1 and not page["more"] and page["offset"] == 1050
    past = router_backend(command_env(settings), "hunt", "--domain", "evil-c2.example",
                          "--offset", "1051")
    assert "1051 match(es)" in past.stdout and "none shown from --offset 1051: past the last" \
        in past.stdout, past.stdout


@pytest.mark.parametrize("packed", [False, True])
async def test_low_macs_posting_a_whole_list_do_not_hide_an_earlier_router(make_client,
                                                                            settings, packed):
    """201 MACs with low addresses post all 100 names of a list after an honest router saw
    one: each indicator gets its own share of the page, earliest first, so the honest
    router is on the first page; the count is exact."""
    client = await make_client(settings)
    db = client.app[DATABASE]
    names = [f"n{n}.list.example" for n in range(100)]
    await upload(client, mac(2), [dns(names[57])])
    await plant_later(db, sybils("00:00:00:00", 201), names)
    if packed:
        await pack(db, tomorrow())
    listed = [indicator("domain", name) for name in names]
    answer = await run_hunt(db, Hunt(tuple(listed), 30, limit=1000, unpacked_reads=50),
                            "test", "command", None)
    first = [m for m in answer["matches"] if m["indicator"] == names[57]]
    assert first[0]["mac"] == mac(2)
    assert answer["matches"].index(first[0]) < 100  # every indicator's first, first
    assert answer["match_count"] == 100 * 201 + 1 or not answer["match_count_exact"]
    if packed:
        assert answer["match_count_exact"] and answer["match_count"] == 100 * 201 + 1


async def test_ten_thousand_indicators_in_one_hunt(make_client, settings):
    client = await make_client(settings)
    db = client.app[DATABASE]
    await upload(client, mac(3), [dns("seen.many.example")])
    await pack(db, tomorrow())
    await upload(client, mac(4), [dns("also.many.example")])
    listed = [indicator("domain", f"x{n}.many.example") for n in range(9_998)]
    listed += [indicator("domain", "seen.many.example"), indicator("domain", "also.many.example")]
    answer = await run_hunt(db, Hunt(tuple(listed), 30), "test", "command", None)
    assert {(m["mac"], m["indicator"]) for m in answer["matches"]} == {
        (mac(3), "seen.many.example"), (mac(4), "also.many.example")}


@pytest.mark.parametrize("packed", [False, True])
async def test_a_removed_router_is_named_by_no_hunt(make_client, settings, sql, packed):
    client = await make_client(settings)
    db = client.app[DATABASE]
    for n in (5, 6):
        await upload(client, mac(n), [dns("gone.example")])
    if packed:
        await pack(db, tomorrow())
    assert await unsubscribe(db, mac(5))
    answer = hunt(settings, "--domain", "gone.example")
    assert [m["mac"] for m in answer["matches"]] == [mac(6)]
    assert answer["match_count"] == 1
    assert sql.value("SELECT count(*) FROM hunt_postings WHERE mac = %s", (mac(5),)) == 0
    assert sql.value("SELECT count(*) FROM hunt_routers WHERE mac = %s", (mac(5),)) == 0
    async def forgotten() -> bool:  # the process told of the removal (the change feed)
        return not client.app[ROUTER_REGISTRY].admitted(mac(5))
    await wait_for(forgotten, timeout=10, interval=0.02)
    # Still sending, in open mode: registered anew, a router like any other from then on.
    await upload(client, mac(5), [dns("gone.example")])
    assert sql.value("SELECT count(*) FROM routers WHERE mac = %s", (mac(5),)) == 1
    assert hunt(settings, "--domain", "gone.example")["match_count"] == 2


async def test_retention_expires_packed_days(make_client, settings, sql):
    client = await make_client(settings)
    db = client.app[DATABASE]
    await upload(client, mac(7), [dns("old.example")])
    await pack(db, tomorrow())
    assert sql.value("SELECT count(*) FROM hunt_packed") > 0
    await run_retention(db, 30, 400, hunt_days=1, now=datetime.now(timezone.utc) + 2 * TOMORROW)
    assert sql.value("SELECT count(*) FROM hunt_packed") == 0
    assert sql.value("SELECT count(*) FROM hunt_packed_days") == 0


async def test_the_console_pages_a_hunt_the_first_sighting_first(make_client, settings):
    client = await make_client(console_settings(settings))
    db = client.app[DATABASE]
    await upload(client, mac(10), [dns("www.evil-c2.example")])
    await plant_later(db, sybils("02:00:00:01", 1050), ["www.evil-c2.example"])
    assert (await sign_in(client, SUPPORT)).status == 303
    page = await client.get("/console/hunt")
    token = re.search(r'name="csrf" value="([^"]+)"', await page.text()).group(1)
    form = {"csrf": token, "indicators": "domain evil-c2.example", "days": "30"}
    first = await (await client.post("/console/hunt", data=form)).text()
    rows = re.findall(r'<tr><td><a href="/console/routers/([0-9a-f:]+)">', first)
    assert rows[0] == mac(10) and len(rows) == 1000
    assert "1 to 1000 shown" in first and 'value="1000">next page' in first
    second = await (await client.post("/console/hunt", data={**form, "offset": "1000"})).text()
    rows = re.findall(r'<tr><td><a href="/console/routers/([0-9a-f:]+)">', second)
    assert len(rows) == 51 and mac(10) not in rows and "previous page" in second
    refused = await client.post("/console/hunt", data={**form, "offset": "-1"})
    assert refused.status == 400


def test_a_hunt_of_too_many_indicators_is_refused_in_one_line(settings, tmp_path):
    listed = tmp_path / "list.txt"
    listed.write_text("".join(f"x{n}.example\n" for n in range(100_001)))
    done = router_backend(command_env(settings), "hunt", "--file", str(listed))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "router-backend hunt: 100001 indicators (a network counts each address): at most "
        "100,000 a hunt (split the file)"]


async def test_a_router_posting_random_names_stops_at_its_daily_budget(make_client, settings,
                                                                        sql):
    """A router sending DNS records of random names (issue 59: 485,647 postings in 60 s)
    adds at most its day's budget, counted across uploads; past it the records are still
    stored, nothing more of the day is indexed (the names it posted before are still found,
    not counted again), and `status` and the console's fleet page say how many records
    were not indexed. (Routers count for the fleet at once here: each has a budget of its
    own.)"""
    budgeted = console_settings(settings.replace(hunt_postings_per_router_day=300,
                                                 fleet_min_router_age_hours=0))
    client = await make_client(budgeted)
    await upload(client, mac(11), [dns("early.budget.example")])
    for batch in range(6):
        await upload(client, mac(11), [dns(f"r{batch}-{n}.random.example") for n in range(100)])
    posted = sql.value("SELECT postings FROM hunt_budgets WHERE mac = %s", (mac(11),))
    rows = sql.value("SELECT count(*) FROM hunt_postings WHERE mac = %s", (mac(11),))
    assert rows == posted and 290 <= posted <= 300  # its values updated count too
    unindexed = sql.value("SELECT unindexed FROM hunt_budgets WHERE mac = %s", (mac(11),))
    assert 0 < unindexed <= 600 - (300 - 1) // 2  # records: each posts its name and parent
    stored = router_backend(command_env(budgeted), "telemetry", "export", "--mac", mac(11))
    assert stored.stdout.count("random.example") == 600  # every record kept
    await upload(client, mac(11), [dns("early.budget.example")])  # past the budget: counted
    answer = hunt(budgeted, "--domain", "early.budget.example")
    assert answer["matches"][0]["records"] == 1
    assert sql.value("SELECT unindexed FROM hunt_budgets WHERE mac = %s",
                     (mac(11),)) == unindexed + 1
    assert hunt(budgeted, "--domain", "r5-99.random.example")["match_count"] == 0
    await upload(client, mac(12), [dns("r5-99.random.example")])  # another router's own
    assert hunt(budgeted, "--domain", "r5-99.random.example")["match_count"] == 1
    status = router_backend(command_env(budgeted), "status")
    assert f"{mac(11)} on " in status.stdout and "1 routers past HUNT_POSTINGS" in status.stdout
    assert (await sign_in(client, SUPPORT)).status == 303
    fleet_page = await (await client.get("/console/")).text()
    assert "1 routers past their daily" in fleet_page and mac(11) in fleet_page


async def test_a_value_at_many_routers_answers_the_same_with_its_postings_let_go(
        make_client, settings, monkeypatch):
    """Past COMPACT_AT postings a hunt keeps only a value's earliest routers' and a bitmap
    of the others: the same page, counts and windows as holding every posting."""
    client = await make_client(settings)
    db = client.app[DATABASE]
    macs = sybils("02:00:00:02", 300)
    base = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    for back in (3, 2, 1):
        day = base - timedelta(days=back)
        await plant(db, macs[back * 40:], ["many.example"], day + timedelta(hours=back))
        await plant(db, macs[:back * 40], ["many.example"], day + timedelta(hours=5))
    await pack(db, tomorrow())
    asked = Hunt((indicator("domain", "many.example"),), 30, limit=50, offset=20)
    whole = await run_hunt(db, asked, "test", "command", None)
    monkeypatch.setattr("server.hunt.sightings.COMPACT_AT", 100)
    let_go = await run_hunt(db, asked, "test", "command", None)
    assert shape(let_go) == shape(whole) and len(shape(whole)) == 50
    assert let_go["match_count"] == whole["match_count"] == 300


@pytest.mark.parametrize("packed", [False, True])
async def test_routers_seen_in_the_same_second_are_each_on_one_page(make_client, settings,
                                                                      packed):
    """Review of issue 59: routers tied to the second were picked by one order and shown by
    another, so pages of one skipped some and repeated others. Every router is on exactly
    one page, ties by MAC, before and after packing."""
    client = await make_client(settings)
    db = client.app[DATABASE]
    now = datetime.now(timezone.utc).replace(microsecond=0)
    macs = [f"02:00:00:03:00:{n:02x}" for n in range(1, 8)]
    for router in reversed(macs):  # numbered in the reverse of MAC order when packed
        await plant(db, [router], ["tied.example"], now)
    if packed:
        await pack(db, tomorrow())
    pages = [hunt(settings, "--domain", "tied.example", "--limit", "1", "--offset", str(n))
             for n in range(len(macs))]
    assert [page["matches"][0]["mac"] for page in pages] == macs


def test_a_day_before_1970_is_refused_in_one_line(settings):
    done = router_backend(command_env(settings), "hunt", "--domain", "x.example", "--until",
                          "0001-01-01")
    assert done.returncode == 2 and "before 1970-01-01" in done.stderr
    assert "Traceback" not in done.stderr


def flow(src: str, dest: str) -> dict:
    return {"event_type": "flow", "src_ip": src, "dest_ip": dest, "proto": "TCP"}


@pytest.mark.parametrize("packed", [False, True])
async def test_a_network_is_hunted_as_every_address_in_it(make_client, settings, packed):
    """Issue 62: a network is hunted as each of its addresses (up to 65,536), named as the
    indicator; one larger is refused in one line, as is an address that is not one."""
    client = await make_client(settings)
    await upload(client, mac(13), [flow("192.168.1.20", "203.0.113.7")])
    await upload(client, mac(14), [flow("192.168.1.20", "203.0.113.200"),
                                   flow("192.168.1.20", "203.0.113.9")])
    await upload(client, mac(15), [flow("192.168.1.20", "203.0.114.1")])
    if packed:
        await pack(client.app[DATABASE], tomorrow())
    answer = hunt(settings, "203.0.113.0/24")
    assert {(m["mac"], m["kind"], m["indicator"], m["records"]) for m in answer["matches"]} \
        == {(mac(13), "network", "203.0.113.0/24", 1), (mac(14), "network", "203.0.113.0/24", 2)}
    assert hunt(settings, "network:203.0.113.0/25")["match_count"] == 2
    assert hunt(settings, "--network", "203.0.113.128/25")["match_count"] == 1
    for args, said in ((("10.0.0.0/8",), "holds 16,777,216 addresses"),
                       (("--ip", "203.0.113.0/24"), "is a network: hunt it as network:VALUE"),
                       (("10.0.0.300",), "'10.0.0.300' is not an IP address"),
                       (("--domain", "203.0.113.50"), "is an address, not a domain name"),
                       (("domain:203.0.113.50",), "is an address, not a domain name")):
        done = router_backend(command_env(settings), "hunt", *args)
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1


def test_a_malformed_address_in_a_file_is_refused_not_hunted_as_a_name(settings, tmp_path):
    listed = tmp_path / "list.txt"
    listed.write_text("evil.example\nip:198.51.100.1\n10.0.0.300\n")
    done = router_backend(command_env(settings), "hunt", "--file", str(listed))
    assert done.returncode == 2
    assert f"{listed}:3: '10.0.0.300' is not an IP address" in done.stderr


async def test_one_indicator_syntax_everywhere(make_client, settings):
    client = await make_client(settings)
    await upload(client, mac(16), [dns("syntax.example")])
    for written in ("domain:syntax.example", "syntax.example"):
        assert hunt(settings, written)["matches"][0]["mac"] == mac(16)
    for written in ("domain:syntax.example", "syntax.example"):
        exported = router_backend(command_env(settings), "telemetry", "export", "--mac",
                                  mac(16), "--match", written)
        assert exported.returncode == 0 and "syntax.example" in exported.stdout


def test_days_are_said_plainly(settings):
    future = (datetime.now(timezone.utc).date() + timedelta(days=3)).isoformat()
    answer = hunt(settings, "--sid", "1", "--until", future)
    assert any("is after today" in note for note in answer["notes"])
    old = hunt(settings, "--sid", "1", "--until", "2020-01-01")
    assert old["searched"]["by"] == "day received"
    table = router_backend(command_env(settings), "hunt", "--sid", "1", "--until", "2020-01-01")
    assert "note: the index begins on" in table.stdout and "records_expired" in table.stdout



async def test_a_retro_hunts_tallies_agree_with_the_hunt(make_client, settings, monkeypatch):
    """The retro-hunt's one pass (server/hunt/tallies.py) gives each router the first and
    last sighting, days and records the hunt gives it: days read in several reads and
    folds, a day packed in two passes, today's rows, and a value past the cap."""
    db = (await make_client(settings)).app[DATABASE]
    now = datetime.now(timezone.utc)
    for days_ago in (5, 3, 3, 1):  # day 3 planted twice: packed in two passes
        await plant(db, [mac(20), mac(21)], ["tally.example", "www.other.example"],
                    now - timedelta(days=days_ago, seconds=days_ago))
        await pack(db)
    await plant(db, [mac(22)], ["tally.example"], now)  # today's, in rows
    await plant(db, [mac(23)], ["www.other.example"], now - timedelta(days=2))  # in rows
    monkeypatch.setattr(tallies, "FOLD_AT", 1)  # folded after every block
    wanted = [indicator("domain", "tally.example"), indicator("domain", "other.example")]
    asked = [(value, n) for n, one in enumerate(wanted) for value in one.postings()]
    since = datetime.combine((now - timedelta(days=9)).date(), datetime.min.time(),
                             timezone.utc)
    until = datetime.combine(now.date(), datetime.min.time(), timezone.utc)
    found = await tallies.router_tallies(db, [a for a, _ in asked], [n for _, n in asked],
                                         len(wanted), since, until, cap=10)
    hunted = await sightings(db, [a for a, _ in asked], [n for _, n in asked], since, until,
                             100, 1000)
    for one, seen in zip(found, hunted):
        assert not one.over
        assert sorted((r.mac, r.first, r.last, r.days, r.records) for r in one.routers) == \
            sorted((s.mac, s.first, s.last, len(s.days), s.records) for s in seen.earliest)
    assert {r.mac: r.days for r in found[0].routers} == {mac(20): 3, mac(21): 3, mac(22): 1}
    capped = await tallies.router_tallies(db, [a for a, _ in asked], [n for _, n in asked],
                                          len(wanted), since, until, cap=2)
    assert [(one.over, len(one.routers)) for one in capped] == [(True, 0), (True, 0)]
    # The packed days read by two processes, a range each, in this read's snapshot: the
    # same tallies, and the same values past the cap.
    monkeypatch.setattr(tallies, "DAYS_A_PROCESS", 1)
    monkeypatch.setattr(tallies.os, "cpu_count", lambda: 2)
    for cap, expected in ((10, found), (2, capped)):
        parallel = await tallies.router_tallies(db, [a for a, _ in asked],
                                                [n for _, n in asked], len(wanted), since,
                                                until, cap=cap, processes=2)
        assert [(one.over, sorted(tuple(vars(r).values()) for r in one.routers))
                for one in parallel] == \
            [(one.over, sorted(tuple(vars(r).values()) for r in one.routers)) for one in expected]


async def post_names(client, router: str, names: list[str], address: str) -> None:
    body = b"\n".join(orjson.dumps(dns(name)) for name in names)
    answer = await client.post("/log/cfm", data=body, headers={
        "X-ID": router, "X-Forwarded-For": address, "Content-Type": "application/x-ndjson"})
    assert answer.status == 200, await answer.text()


async def test_fresh_macs_of_one_network_share_one_routers_budget(make_client, settings, sql):
    """A red team's finding: 30 fresh MACs from one address added 660,000 postings in a
    minute, each with a day's budget of its own. Routers that do not count for the fleet yet
    share one budget for the network they upload from: 12 fresh MACs from one /24, indexed
    in one batch and then across three lanes at once, add at most 300 between them (the
    network's row says what they added); an established router of the same network and a
    fresh one of another network each keep a budget of their own."""
    client = await make_client(settings.replace(hunt_postings_per_router_day=300,
                                                hunt_index_seconds=3600))
    budget = HuntBudget.from_settings(client.app[SETTINGS])
    established, other, fresh = mac(60), mac(80), [mac(61 + n) for n in range(12)]
    sql.rows("INSERT INTO routers (mac, registered_at) VALUES (%s, now() - interval '4 days')",
             (established,))
    for round_ in range(2):
        for n, router in enumerate(fresh):
            await post_names(client, router, [f"f{round_}-{n}-{k}.sybil.example"
                                              for k in range(60)], "198.51.100.7")
        # the first round in one batch, the second across three lanes at once
        await index_pending(client.app[DATABASE], budget, lanes=1 + 2 * round_)
    await post_names(client, established, [f"e{k}.own.example" for k in range(100)],
                     "198.51.100.9")
    await post_names(client, other, [f"o{k}.other.example" for k in range(100)], "203.0.113.7")
    await indexed(client)
    fresh_days = sql.rows("SELECT sum(postings), sum(unindexed) FROM hunt_budgets "
                          "WHERE mac = ANY(%s::macaddr[])", (fresh,))[0]
    rows = sql.value("SELECT count(*) FROM hunt_postings WHERE mac = ANY(%s::macaddr[])",
                     (fresh,))
    assert 250 <= fresh_days[0] <= 300 and rows == fresh_days[0] and fresh_days[1] > 0
    other_day = sql.value("SELECT postings FROM hunt_budgets WHERE mac = %s", (other,))
    assert sql.rows("SELECT network::text, postings FROM hunt_network_budgets ORDER BY network"
                    ) == [("198.51.100.0/24", fresh_days[0]), ("203.0.113.0/24", other_day)]
    for router, domain in ((established, "example.own"), (other, "example.other")):
        assert sql.value("SELECT count(*) FROM hunt_postings WHERE mac = %s AND value LIKE %s",
                         (router, f"{domain}.%")) == 100  # every name of its own (reversed)


async def test_fresh_macs_of_one_ipv6_allocation_share_its_budgets(make_client, settings, sql):
    """A hostile review's finding: ten fresh MACs from ten /48s of one /32 each took a budget
    of their own. The /48s of one /32 share PER_ALLOCATION (3) budgets, as the fleet counts
    them: six fresh MACs from six /48s add at most 900 between them at a budget of 300."""
    client = await make_client(settings.replace(hunt_postings_per_router_day=300,
                                                hunt_index_seconds=3600))
    fresh = [mac(90 + n) for n in range(6)]
    for n, router in enumerate(fresh):
        await post_names(client, router, [f"v{n}-{k}.six.example" for k in range(250)],
                         f"2a01:4f8:{n + 1:x}::1")
    await indexed(client)
    added = sql.value("SELECT sum(postings) FROM hunt_budgets WHERE mac = ANY(%s::macaddr[])",
                      (fresh,))
    assert 850 <= added <= 900
    assert sql.rows("SELECT network::text, postings FROM hunt_network_budgets") == [
        ("2a01:4f8::/32", added)]


async def test_one_large_upload_adds_at_most_its_days_budget(make_client, settings, sql):
    """A router's first upload of the day, of 3,000 new names (review of the indexer: one
    upload of 99,000 records wrote 398,000 postings against a budget of 20,000), adds at most
    what its day has left and one free allowance; the rest is counted as not indexed."""
    client = await make_client(settings.replace(hunt_postings_per_router_day=100))
    await upload(client, mac(30), [dns(f"n{n}.large.example") for n in range(3000)])
    rows = sql.value("SELECT count(*) FROM hunt_postings WHERE mac = %s", (mac(30),))
    assert 100 <= rows <= 100 + POSTINGS_FREE
    assert sql.value("SELECT unindexed FROM hunt_budgets WHERE mac = %s", (mac(30),)) > 0


async def test_a_router_days_counters_stop_at_their_ceiling(client, sql):
    """A router-day's records not indexed, or a value's records, past 2**31 (integer
    columns) failed its statement, and every later upload of the router that day was set
    aside (a hostile review); they stop at their ceiling."""
    db = client.app[DATABASE]
    day = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    day_of = {"mac": mac(34), "day": day, "seen": day, "budget": 100, "network": None}
    for _ in range(2):
        await db.execute(*unindexed_statement({**day_of, "records": 2_000_000_000,
                                               "dropped": 2_000_000_000}))
        await db.execute(postings_statement({**day_of, "records": 2_000_000_000, "rows": [
            {"code": "d", "value": "counted.example", "records": 2_000_000_000}]}))
    assert sql.rows("SELECT unindexed FROM hunt_budgets WHERE mac = %s", (mac(34),)) == \
        [(INTEGER_MAX,)]
    assert sql.rows("SELECT records FROM hunt_postings WHERE mac = %s", (mac(34),)) == \
        [(INTEGER_MAX,)]


async def test_no_upload_holds_up_the_others(make_client, settings, sql, caplog):
    """A flow whose alert carries a list for a signature id (/log/cfm does not check it)
    used to stop the indexer for every router; and an upload whose stored chunk cannot be
    read (damaged on disk) is set aside, named in the log, while the others are indexed."""
    client = await make_client(settings.replace(hunt_index_seconds=3600))
    hostile = {**flow("192.168.1.20", "203.0.113.66"), "alert": {"signature_id": [1]}}
    await client.post("/log/cfm", data=orjson.dumps(hostile), headers={
        "X-ID": mac(31), "Content-Type": "application/x-ndjson"})
    await client.post("/log/cfm", data=orjson.dumps(dns("damaged.example")), headers={
        "X-ID": mac(32), "Content-Type": "application/x-ndjson"})
    sql.rows("UPDATE telemetry_chunks SET body = '\\x00'::bytea WHERE mac = %s", (mac(32),))
    await upload(client, mac(33), [dns("honest.example")])
    assert hunt(settings, "--domain", "honest.example")["match_count"] == 1
    assert hunt(settings, "--ip", "203.0.113.66")["match_count"] == 1
    assert sql.value("SELECT count(*) FROM hunt_pending") == 0
    assert f"the upload of {mac(32)}" in caplog.text and "set aside" in caplog.text


async def test_lanes_index_every_upload_once(make_client, settings, sql, monkeypatch):
    """Small uploads of many routers, several of each router, taken by lanes (HUNT_INDEX_LANES)
    in batches of several uploads a transaction, by two indexers at once (the loop and a
    hunt's catching up, or two processes): every upload's values posted, none twice, and
    each router's first and last sighting its first and last upload's."""
    client = await make_client(settings.replace(hunt_index_seconds=3600, hunt_index_lanes=3,
                                                intel_match_cron_schedule="0 0 1 1 *"))
    monkeypatch.setattr(indexer, "BATCH_RECORDS", 3)  # batches of a few uploads
    routers = [mac(40 + n) for n in range(7)]
    for round_number in range(3):
        for router in routers:
            body = b"\n".join(orjson.dumps(dns(name))
                              for name in ("lanes.example", f"r{round_number}.example"))
            answer = await client.post("/log/cfm", data=body, headers={
                "X-ID": router, "Content-Type": "application/x-ndjson"})
            assert answer.status == 200
    assert sql.value("SELECT count(*) FROM hunt_pending") == 21
    db = client.app[DATABASE]
    done = await asyncio.gather(index_pending(db, HuntBudget(POSTINGS_PER_ROUTER_DAY), lanes=3),
                                index_pending(db, HuntBudget(POSTINGS_PER_ROUTER_DAY), 5.0, lanes=3))
    assert sum(one.uploads for one in done) == 21 and sum(one.set_aside for one in done) == 0
    assert sql.value("SELECT count(*) FROM hunt_pending") == 0
    rows = sql.rows("SELECT mac::text, records, first_seen < last_seen FROM hunt_postings "
                    "WHERE kind = 'd' AND value LIKE '%%lanes%%' ORDER BY mac")
    assert rows == [(router, 3, True) for router in routers]
    answer = hunt(settings, "--domain", "lanes.example")
    assert [m["networks"] for m in answer["matches"]] == [["127.0.0.0/24"]] * 7  # the test's
    # client; a router's day keeps its first NETWORKS_KEPT networks, once each
    assert sql.value("SELECT max(cardinality(networks)) FROM hunt_budgets") == 1


async def test_a_routers_day_keeps_its_first_networks(make_client, settings, sql):
    """The networks a router's uploads came from are kept with its day, once each, the first
    NETWORKS_KEPT of them: a router framed from elsewhere shows a network it never used,
    and a flood from many networks cannot grow the row."""
    db = (await make_client(settings)).app[DATABASE]
    seen = datetime.now(timezone.utc)
    networks = [f"203.0.{n}.0/24" for n in range(12)]
    for network in [networks[0], *networks]:
        postings = Postings()
        postings.add(dns("framed.example"))
        await db.execute(postings_statement({**postings.params(seen), "mac": mac(50),
                                             "budget": POSTINGS_PER_ROUTER_DAY,
                                             "network": network}))
    assert sql.value("SELECT networks::text[] FROM hunt_budgets WHERE mac = %s",
                     (mac(50),)) == networks[:NETWORKS_KEPT]


def test_uploads_are_batched_by_their_records():
    """Small uploads share a batch up to BATCH_RECORDS, a larger one is alone, and rows
    pending from before migration 0033 (records 0) are batched too (the first of them
    found no batch to join)."""
    at = datetime.now(timezone.utc)
    pending = [(mac(1), "cfm", at, 0), (mac(2), "cfm", at, 0),
               (mac(3), "cfm", at, indexer.BATCH_RECORDS - 1),
               (mac(4), "cfm", at, indexer.BATCH_RECORDS + 5), (mac(5), "cfm", at, 2)]
    assert [[upload["mac"] for upload in batch] for batch in indexer.batches(pending)] == \
        [[mac(1), mac(2), mac(3)], [mac(4)], [mac(5)]]


POSTED = "SELECT kind, triples IS NOT NULL FROM hunt_pending WHERE mac = %s ORDER BY kind"
POSTINGS_OF = "SELECT kind, value, records FROM hunt_postings WHERE mac = %s ORDER BY 1, 2"


def quiet_indexer(settings):
    """Uploads left pending until the test indexes them: neither the indexer's loop nor the
    retro-hunt (which indexes first, every minute) runs meanwhile."""
    return settings.replace(hunt_index_seconds=3600, intel_match_cron_schedule="0 0 1 1 *")


async def test_an_upload_of_flows_and_alerts_is_tallied_as_announced_not_read_back(
        make_client, settings, sql, caplog):
    """An upload carrying only flows and plain alerts is announced with its triples and
    tallied from them: the same postings as its chunks read back give, and its chunks not
    read (damaged here: a read would set the upload aside)."""
    client = await make_client(quiet_indexer(settings))
    plain = [r for r in corpus_records()
             if r.get("event_type") in ("alert", "flow") and not r.get("dns")]
    assert len(plain) > 1_000
    for router in (mac(40), mac(41)):
        for path, kind in (("/log/events", "alert"), ("/log/cfm", "flow")):
            body = b"\n".join(orjson.dumps(r) for r in plain if r["event_type"] == kind)
            answer = await client.post(path, data=body, headers={
                "X-ID": router, "Content-Type": "application/x-ndjson"})
            assert answer.status == 200, await answer.text()
    assert sql.rows(POSTED, (mac(40),)) == [("cfm", True), ("events", True)]
    sql.rows("UPDATE telemetry_chunks SET body = '\\x00'::bytea WHERE mac = %s", (mac(40),))
    sql.rows("UPDATE hunt_pending SET triples = NULL WHERE mac = %s", (mac(41),))
    await indexed(client)
    assert "set aside" not in caplog.text
    announced, read_back = (sql.rows(POSTINGS_OF, (router,)) for router in (mac(40), mac(41)))
    assert announced == read_back and len(announced) > 40


async def test_an_upload_of_protocol_records_or_many_triples_is_read_back(make_client,
                                                                          settings, sql):
    """One DNS record among flows, or more distinct triples than an announcement carries:
    the upload is announced without triples (a row of bounded size) and its chunks read."""
    client = await make_client(quiet_indexer(settings))
    many = [flow(f"10.{n >> 8}.{n & 255}.1", "198.51.100.7")
            for n in range(TRIPLES_ANNOUNCED + 1)]
    mixed = [flow("192.168.1.2", "198.51.100.8"), dns("read.back.example")]
    for router, records in ((mac(42), many), (mac(43), mixed)):
        await client.post("/log/cfm", data=b"\n".join(orjson.dumps(r) for r in records),
                          headers={"X-ID": router, "Content-Type": "application/x-ndjson"})
        assert sql.rows(POSTED, (router,)) == [("cfm", False)]
    await indexed(client)
    assert hunt(settings, "--ip", f"10.{TRIPLES_ANNOUNCED >> 8}.{TRIPLES_ANNOUNCED & 255}.1",
                "--ip", "198.51.100.8", "--domain", "read.back.example")["match_count"] == 3


async def test_two_uploads_announced_under_one_key_are_read_back_whole(client, sql):
    """Two uploads of one router received in the same microsecond share their chunks' key
    and one pending row: their records are summed and the triples of the first dropped, so
    that the indexer reads the chunks of both."""
    db = client.app[DATABASE]
    await db.execute("INSERT INTO routers (mac) VALUES (%s)", (mac(44),))
    received = datetime.now(timezone.utc)
    for records in (1, 2):
        pending = PendingUpload()
        for _ in range(records):
            pending.observe(flow("192.168.1.3", "198.51.100.9"))
        await db.execute(ADD_PENDING, {"mac": mac(44), "kind": "cfm", "upload_received_at":
                                       received, "pending_records": records,
                                       "pending_network": None, **pending.params()})
    assert sql.rows("SELECT records, triples FROM hunt_pending WHERE mac = %s", (mac(44),)) \
        == [(3, None)]


async def test_a_router_day_never_passes_its_budget_however_its_uploads_are_batched(
        make_client, settings, sql):
    """A red team's finding: two uploads in one indexer batch each got the whole allowance
    (41,992 postings against a budget of 22,000). Three uploads of 250 new names, indexed
    together, against a budget of 300: the day holds at most 300 (its parents' rows updated
    count against it too), the rest counted as not indexed."""
    client = await make_client(settings.replace(hunt_postings_per_router_day=300,
                                                hunt_index_seconds=3600))
    for batch in range(3):
        body = b"\n".join(orjson.dumps(dns(f"b{batch}-{n}.batched.example"))
                          for n in range(250))
        answer = await client.post("/log/cfm", data=body, headers={
            "X-ID": mac(40), "Content-Type": "application/x-ndjson"})
        assert answer.status == 200
    await indexed(client)
    posted = sql.value("SELECT postings FROM hunt_budgets WHERE mac = %s", (mac(40),))
    rows = sql.value("SELECT count(*) FROM hunt_postings WHERE mac = %s", (mac(40),))
    assert rows == posted and 290 <= posted <= 300
    assert sql.value("SELECT unindexed FROM hunt_budgets WHERE mac = %s", (mac(40),)) > 0
