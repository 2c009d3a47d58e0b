"""Threat intelligence (issue 60) end to end, with real parts: feeds served by a local HTTP
server, routers uploading over HTTP (and earlier days planted through the service's own
postings statement, then packed), the owners' mail through a real SMTP server (aiosmtpd),
and the commands run as an operator runs them."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import zipfile
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import orjson
import pytest
from aiohttp import web

from engine.intel import FILES, rules_file
from engine.intel import intel_document as build_document
from server.intel import sql as intel_db
from server.intel.fetching import FetchError, _capped, fetch
from server.intel.formats import FeedError, read
from server.intel.config import IntelConfig
from server.intel.jobs import fetch_feeds, match_now
from server.hunt.packing import pack
from server.telemetry.indicators import feed_value
from server.typedefs import DATABASE, NOTIFIER
from testkit.database import command_env, settings_for
from testkit.server import ServerRunner
from testkit.waiting import wait_for
from tests.commands import router_backend
from tests.test_hunt import dns, upload
from tests.test_console import SUPPORT, console_settings, sign_in
from tests.test_hunt_packed import plant
from tests.test_notifications import smtp, smtp_settings  # noqa: F401 (fixture)

EARLY = "02:11:00:00:00:01"    # saw the C2 name four days ago (packed since)
TODAY = "02:11:00:00:00:02"    # sees it, and an address, in an upload now
OTHER = "02:11:00:00:00:03"    # saw nothing listed
CROWD = [f"02:11:00:00:01:{n:02x}" for n in range(12)]  # all saw a popular name


class FeedServer:
    """Serves each path's current body (or status), with an ETag, and counts requests."""

    def __init__(self) -> None:
        self.bodies: dict[str, tuple[int, bytes, dict]] = {}
        self.requests: list[tuple[str, str | None]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, request.headers.get("If-None-Match")))
        status, body, headers = self.bodies.get(request.path, (404, b"", {}))
        etag = f'"{hash(body) & 0xffffffff:x}"'
        if status == 200 and request.headers.get("If-None-Match") == etag:
            return web.Response(status=304)
        if status == 200:
            headers = {"ETag": etag, **headers}
        return web.Response(status=status, body=body, headers=headers)


@pytest.fixture
async def feeds(aiohttp_server):
    served = FeedServer()
    app = web.Application()
    app.router.add_get("/{tail:.*}", served.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    return served, str(server.make_url("/"))


NEVER = "0 0 1 1 *"  # a tick (midnight of 1 January) no test meets, as testkit.database does


@pytest.fixture
async def house(smtp, database, tmp_path, make_client, feeds):  # noqa: F811
    inbox, controller = smtp
    # The intel jobs never tick by themselves: a test runs them when it means to (a minute's
    # match run in the background between two of its steps moved what the next one read).
    settings = console_settings(smtp_settings(
        database, tmp_path, controller.port, SERVICES="router,notifications",
        INTEL_PREVALENCE_MAX="0.5", INTEL_MATCH_CRON_SCHEDULE=NEVER,
        INTEL_FETCH_CRON_SCHEDULE=NEVER))
    client = await make_client(settings)
    served, base = feeds
    return settings, client, inbox, served, base


async def intel(settings, *args: str, **env: str):
    """The command in a thread: the feed server answers in this test's event loop."""
    return await asyncio.to_thread(router_backend, command_env(settings, **env), "intel", *args)


def subscriptions(settings, *args: str):
    return router_backend(command_env(settings), "subscriptions", *args)


THREATFOX = {"1": [{"ioc_value": "c2.evil-intel.example", "ioc_type": "domain",
                    "confidence_level": 90, "first_seen_utc": "2026-11-01 10:00:00"}],
             "2": [{"ioc_value": "45.33.32.77:443", "ioc_type": "ip:port",
                    "confidence_level": 75}],
             "3": [{"ioc_value": "never-seen.example", "ioc_type": "domain",
                    "confidence_level": 50}],
             "4": [{"ioc_value": "10.1.2.3:80", "ioc_type": "ip:port"}],   # private
             "5": [{"ioc_value": "popular.example", "ioc_type": "domain"}],  # everybody's
             "6": [{"ioc_value": "evil\"; sid:1;\n.example", "ioc_type": "domain"}],
             "7": [{"ioc_value": "a" * 300 + ".example", "ioc_type": "domain"}],
             "8": [{"ioc_value": "93.184.216.34:8080", "ioc_type": "ip:port"}]}  # allowlisted


async def test_a_feed_is_delivered_sighted_and_told_to_the_owner(house, sql):
    settings, client, inbox, served, base = house
    db = client.app[DATABASE]
    four_days_ago = datetime.now(timezone.utc) - timedelta(days=4)
    await plant(db, [EARLY], ["www.c2.evil-intel.example"], four_days_ago)
    await plant(db, CROWD, ["popular.example"], four_days_ago)
    # Routers of days ago (registered then): old enough to count toward a value's prevalence.
    await db.execute("UPDATE routers SET registered_at = %s", (four_days_ago,))
    await pack(db)
    await upload(client, TODAY, [dns("c2.evil-intel.example"),
                                 {**dns("cdn.other.example"), "dest_ip": "45.33.32.77"}])
    await upload(client, OTHER, [dns("harmless.example")])
    for router, user in ((EARLY, "user-early"), (TODAY, "user-today")):
        done = subscriptions(settings, "owner", router, "--user", user, "--email",
                             f"{user}@example.org")
        assert done.returncode == 0, done.stderr
    assert router_backend(command_env(settings), "allowlist", "add", "93.184.216.0/24",
                          "--note", "our partner").returncode == 0
    served.bodies["/threatfox.json"] = (200, orjson.dumps(THREATFOX), {})
    done = await intel(settings, "add", "threatfox", f"{base}threatfox.json", "--format",
                 "threatfox")
    assert done.returncode == 0, done.stderr

    done = await intel(settings, "fetch")
    assert done.returncode == 0, done.stderr
    assert "threatfox: 6 indicators" in done.stdout and "2 lines refused" in done.stdout

    # Sightings: exactly the truth, the earlier router from the packed days included.
    sighted = orjson.loads((await intel(settings, "sightings", "--json")).stdout)["sightings"]
    assert {(s["mac"], s["indicator"]) for s in sighted} == {
        (EARLY, "c2.evil-intel.example"), (TODAY, "c2.evil-intel.example"),
        (TODAY, "45.33.32.77")}
    assert all(s["source"] == "threatfox" for s in sighted)
    # The popular name is held, not sighted nor delivered.
    decisions = (await intel(settings, "decisions")).stdout
    assert "popular.example\theld\t12" in decisions

    # Owners: one notification per (router, indicator), one email an hour each.
    await client.app[NOTIFIER].retry_due()
    rows = sql.rows("SELECT user_id, channel, status, metadata->>'indicator' "
                    "FROM notifications WHERE type = 'threat_sighting' ORDER BY 1, 4")
    assert [(u, i) for u, _, _, i in rows] == [
        ("user-early", "c2.evil-intel.example"), ("user-today", "45.33.32.77"),
        ("user-today", "c2.evil-intel.example")]
    assert sorted(c for _, c, _, _ in rows) == ["email", "email", "feed"]
    assert sorted(to for _, (to,), _ in inbox.messages) == [
        "user-early@example.org", "user-today@example.org"]
    # A rerun (the job, a replayed feed) tells nobody again and sights nothing twice.
    await match_now(db, IntelConfig.from_settings(settings))
    await fetch_feeds(db, IntelConfig.from_settings(settings))
    assert sql.value("SELECT count(*) FROM notifications WHERE type = 'threat_sighting'") == 3
    assert sql.value("SELECT count(*) FROM intel_sightings") == 3
    feed = await client.get("/api/workflow/users/user-today/notifications")
    assert (await feed.json())["total"] == 2

    # The document carries the indicators; private, allowlisted, held and hostile values
    # never reach it.
    document, etag = await intel_document(client, TODAY)
    names = decoded(document["files"]["rb-intel-domains.lst"])
    assert names == ["c2.evil-intel.example", "never-seen.example"]
    assert document["files"]["rb-intel-ip.lst"] == "45.33.32.77\n"
    assert [entry["address"] for entry in document["block"]] == ["45.33.32.77"]
    assert "10.1.2.3" not in str(document) and "93.184.216.34" not in str(document)
    assert "dataset:isset,rb-intel-domains,type string,load rb-intel-domains.lst" in \
        document["rules"]
    polled = await client.get("/rules/last_updated", headers={"X-ID": TODAY})
    assert (await polled.json())["intel_etag"] == etag
    again = await client.get("/rules/intel", headers={"X-ID": TODAY, "If-None-Match": etag})
    assert again.status == 304

    # A suppressed value leaves every router's document at the next poll: whole, or as what
    # changed since the document the router holds.
    done = await intel(settings, "suppress", "domain:never-seen.example", "--note", "a sinkhole")
    assert done.returncode == 0, done.stderr
    delta = await client.get("/rules/intel?delta=1", headers={"X-ID": TODAY,
                                                               "If-None-Match": etag})
    assert delta.status == 200
    changed = await delta.json()
    assert changed["delta_from"] == etag.removeprefix('W/"').rstrip('"')
    assert changed["files"] == {"rb-intel-domains.lst": {
        "add": [], "remove": [base64.b64encode(b"never-seen.example").decode()]}}
    assert changed["block"] == {"add": [], "remove": []}
    document, new_etag = await intel_document(client, TODAY, etag)
    assert new_etag != etag and delta.headers["ETag"] == new_etag
    assert decoded(document["files"]["rb-intel-domains.lst"]) == ["c2.evil-intel.example"]
    log = sql.rows("SELECT actor, action FROM intel_log ORDER BY id")
    assert ("job:intel-fetch", "retro-hunt") in log or any(
        action == "retro-hunt" for _, action in log)
    assert any(action == "suppressed" and actor.startswith("shell:") for actor, action in log)

    # The console: the Intel page (feeds, held values, sightings) and the router's page.
    assert (await sign_in(client, SUPPORT)).status == 303
    page = await (await client.get("/console/intel")).text()
    assert "threatfox" in page and "popular.example" in page and "held" in page
    assert page.count("c2.evil-intel.example") == 2 and "told" in page
    page = await (await client.get(f"/console/routers/{TODAY}")).text()
    assert "Threat sightings (2)" in page and "45.33.32.77" in page


def decoded(text: str) -> list[str]:
    return [base64.b64decode(line).decode() for line in text.splitlines()]


async def intel_document(client, router: str, etag: str | None = None) -> tuple[dict, str]:
    headers = {"X-ID": router, **({"If-None-Match": etag} if etag else {})}
    answer = await client.get("/rules/intel", headers=headers)
    assert answer.status == 200, answer.status
    return await answer.json(), answer.headers["ETag"]


@pytest.mark.parametrize("body,status,why", [
    (b"\x1f\x8b" + b"x" * 50, 200, "gzip body is damaged"),
    (gzip.compress(b"a.example\n" * 3_000_000), 200, "opens to more than"),
    (b"b.example\n" * 100_001, 200, "the feed is 1,000,010 bytes, more than 1,000,000"),
    (b"", 500, "HTTP 500"),
    (b"\xff\xfe not text", 200, "not UTF-8"),
    (b"# nothing here but a comment\n", 200, "gives no indicator"),
])
async def test_a_broken_or_hostile_fetch_keeps_the_previous_version(house, sql, body, status,
                                                                    why):
    settings, client, _, served, base = house
    served.bodies["/list.txt"] = (200, b"kept.example\n45.33.32.5\n", {})
    assert (await intel(settings, "add", "list", f"{base}list.txt", "--format", "plain")).returncode == 0
    assert (await intel(settings, "fetch", "list")).returncode == 0
    served.bodies["/list.txt"] = (status, body, {})
    done = await intel(settings, "fetch", "list", INTEL_FEED_MAX_BYTES="1000000")
    assert done.returncode == 1
    assert "list: kept the previous version" in done.stdout and why in done.stdout, done.stdout
    assert sorted(sql.rows("SELECT kind, value FROM intel_indicators")) == [
        ("domain", "example.kept"), ("ip", "45.33.32.5")]
    listed = (await intel(settings, "list")).stdout
    assert why in listed and "\t2\t2\t0\t" in listed


async def test_a_redirect_to_a_private_address_is_refused(house):
    settings, _, served, base = house[0], house[1], house[3], house[4]
    served.bodies["/moved"] = (302, b"", {"Location": "http://10.9.8.7/feed.txt"})
    assert (await intel(settings, "add", "moved", f"{base}moved", "--format", "plain")).returncode == 0
    done = await intel(settings, "fetch", "moved")
    assert done.returncode == 1
    assert "redirected to '10.9.8.7', which is not a public address" in done.stdout


async def test_a_feed_unchanged_is_not_downloaded_again(house):
    settings, _, served, base = house[0], house[1], house[3], house[4]
    served.bodies["/list.txt"] = (200, b"kept.example\n", {})
    await intel(settings, "add", "list", f"{base}list.txt", "--format", "plain")
    await intel(settings, "fetch", "list")
    done = await intel(settings, "fetch", "list")
    assert "list: not modified" in done.stdout
    assert served.requests[-1][1] is not None  # the ETag named


def test_a_feed_of_too_many_lines_is_refused_whole():
    with pytest.raises(FeedError, match="2,000,001 lines, more than 2,000,000"):
        read("plain", b"a\n" * 2_000_001)


def test_formats_read_what_their_publishers_write():
    urlhaus = (b'# URLhaus\n"1","2026-11-20 10:00:00","http://bad.example/x.exe","online",'
               b'"","malware_download","exe","https://urlhaus.abuse.ch/url/1/","r"\n'
               b'"2","2026-11-20 11:00:00","http://[2001:db8::1]/a","online","","m","","",""\n')
    version = read("urlhaus", urlhaus)
    assert set(version.entries) == {("domain", "example.bad"), ("ip", "2001:db8::1")}
    drop = (b'{"cidr":"1.10.16.0/20","sblid":"SBL256894","rir":"apnic"}\n'
            b'{"type":"metadata","timestamp":1700000000,"size":1,"records":1}\n')
    assert set(read("drop", drop).entries) == {("network", "1.10.16.0/20")}
    misp = {"Event": {"Attribute": [
        {"type": "ip-dst|port", "value": "198.51.100.9|443", "to_ids": True,
         "timestamp": "1700000000"},
        {"type": "domain|ip", "value": "c2.example|198.51.100.10", "to_ids": True},
        {"type": "sha256", "value": "A" * 64, "to_ids": True},
        {"type": "comment", "value": "x", "to_ids": False}],
        "Object": [{"Attribute": [{"type": "md5", "value": "b" * 32, "to_ids": True}]}]}}
    version = read("misp", orjson.dumps(misp))
    assert set(version.entries) == {("ip", "198.51.100.9"), ("domain", "example.c2"),
                                    ("ip", "198.51.100.10"), ("sha256", "a" * 64),
                                    ("md5", "b" * 32)}
    assert version.refused == 1
    plain = read("plain", b"# c\n10.0.0.0/8\nhttps://x.example/p\n" + b"f" * 64 + b"\nbad..name\n")
    assert set(plain.entries) == {("network", "10.0.0.0/8"), ("domain", "example.x"),
                                  ("sha256", "f" * 64)}
    assert plain.refusals == {"not domain": 1}


# What suricata-check (on PyPI) still finds in the intel rules, each explained in
# docs/intel.md: no `target` (C100: an address set alerts for either end), no direction
# (S000: a listed address is bad both ways), no content (S020: a dataset lookup is one
# hash lookup on the buffer, as Suricata's own dataset examples are).
EXPLAINED = {"C100", "S000", "S020"}


def test_the_rules_file_passes_suricata_check_but_for_explained_findings(tmp_path):
    rules = tmp_path / "rb-intel.rules"
    rules.write_text(rules_file(set(FILES)))
    done = subprocess.run([sys.executable, "-m", "suricata_check", "-r", str(rules), "-o",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    findings = [line for line in (tmp_path / "suricata-check-fast.log").read_text()
                .splitlines() if line.strip()]
    assert len(rules.read_text().splitlines()) == 10  # a comment and nine rules, all checked
    codes = {line.split("]", 1)[0].lstrip("[") for line in findings}
    assert codes <= EXPLAINED, findings
    assert all("(INFO)" in line for line in findings), findings


async def test_what_a_hostile_feed_sends_is_refused_and_stops_no_other_feed(house, sql):
    settings, client, _, served, base = house
    served.bodies["/bad.json"] = (200, orjson.dumps({"data": [
        {"ioc_type": ["domain"], "ioc_value": "x.example"},
        {"ioc_type": "domain", "ioc_value": "future.example", "confidence_level": 100,
         "last_seen_utc": "9999-12-31 23:59:59"},
        {"ioc_type": "domain", "ioc_value": "org"}]}), {})
    served.bodies["/net.txt"] = (200, b"2a00::%1/64\n32.0.0.0/3\n45.10.0.0/16\n"
                                 b"45.10.3.0/24\n", {})
    served.bodies["/good.txt"] = (200, b"good.example\n", {})
    for name, path, form in (("a-bad", "bad.json", "threatfox"), ("b-net", "net.txt", "plain"),
                             ("z-good", "good.txt", "plain")):
        assert (await intel(settings, "add", name, f"{base}{path}", "--format",
                            form)).returncode == 0
    done = await intel(settings, "fetch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a-bad: 1 indicators" in done.stdout and "z-good: 1 indicators" in done.stdout
    assert "b-net: 3 indicators (3 new, 0 gone), 1 lines refused" in done.stdout
    # A time in the future is now; no expiry beyond two years.
    last_seen, expires = sql.rows("SELECT last_seen, expires_at FROM intel_indicators "
                                  "WHERE value = 'example.future'")[0]
    assert last_seen <= datetime.now(timezone.utc) < expires
    assert expires < datetime.now(timezone.utc) + timedelta(days=2 * 365 + 1)
    # Polling works; the /3 is held for an operator, the overlapping networks are merged.
    polled = await client.get("/rules/last_updated", headers={"X-ID": OTHER})
    assert polled.status == 200
    document, _ = await intel_document(client, OTHER)
    assert [e["address"] for e in document["block"]] == ["45.10.0.0/16"]
    assert "32.0.0.0/3\theld" in (await intel(settings, "decisions")).stdout
    assert (await intel(settings, "release", "network:32.0.0.0/3", "--note",
                        "checked")).returncode == 0
    await wait_for(lambda: _blocks(client, "32.0.0.0/3"), timeout=10, interval=0.1)


async def _blocks(client, address: str) -> bool:
    document, _ = await intel_document(client, OTHER)
    return address in [e["address"] for e in document["block"]]


async def test_a_stranger_cannot_unlist_an_address_by_polling_from_it(house, sql):
    settings, client, _, served, base = house
    db = client.app[DATABASE]
    served.bodies["/c2.txt"] = (200, b"45.9.9.9\n45.9.9.10\n", {})
    await intel(settings, "add", "c2", f"{base}c2.txt", "--format", "plain")
    await intel(settings, "fetch")
    rebuilt = _Rebuilds(settings, client)
    # A MAC registered by its first poll, from the listed address (behind the proxy).
    polled = await client.get("/rules/last_updated", headers={
        "X-ID": "02:11:00:00:0c:02", "X-Forwarded-For": "45.9.9.9"})
    assert polled.status == 200
    await rebuilt.seen()
    assert await _blocks(client, "45.9.9.9")
    # In mac mode (this service's), whoever knows a router's MAC polls as it: not even a
    # router an operator subscribed, keyed and registered for days, keeps it off (the red
    # team's fourth attack: a subscribed router's MAC polled from the address to unlist).
    sql.rows("INSERT INTO router_keys (mac, key_hash, issued_by, issued_at) VALUES "
             "('02:11:00:00:0c:02', '\\x00', 'enrollment', now() - interval '4 days')")
    sql.rows("UPDATE routers SET registered_by = 'operator', "
             "registered_at = now() - interval '4 days' WHERE mac = '02:11:00:00:0c:02'")
    await rebuilt.seen()
    assert await _blocks(client, "45.9.9.9")
    # In key mode a poll needs the router's key: a router keyed and registered for
    # FLEET_MIN_ROUTER_AGE_HOURS, or one an operator subscribed, keeps its poll address off;
    # a key just issued (the fleet's token is enough for that) does not.
    def kept_off() -> bool:
        return "45.9.9.9" not in {value for _, value, _ in rows}
    rows = await intel_db.delivered(db, [], 100, timedelta(hours=72), True)
    assert kept_off()
    sql.rows("UPDATE routers SET registered_by = 'auto' WHERE mac = '02:11:00:00:0c:02'")
    rows = await intel_db.delivered(db, [], 100, timedelta(hours=72), True)
    assert kept_off()
    sql.rows("UPDATE router_keys SET issued_at = now()")
    rows = await intel_db.delivered(db, [], 100, timedelta(hours=72), True)
    assert not kept_off()
    sql.rows("UPDATE routers SET registered_by = 'operator' WHERE mac = '02:11:00:00:0c:02'")
    rows = await intel_db.delivered(db, [], 100, timedelta(hours=72), True)
    assert kept_off()
    # Its key gone (an operator reset it), nothing protects the address.
    sql.rows("DELETE FROM router_keys")
    rows = await intel_db.delivered(db, [], 100, timedelta(hours=72), True)
    assert not kept_off()


class _Rebuilds:
    """A rebuild of the document after the changes made so far, seen: a sentinel value
    (45.9.9.10) suppressed and released in turn, each time waited for in the document."""

    def __init__(self, settings, client) -> None:
        self._settings, self._client, self._present = settings, client, True

    async def seen(self) -> None:
        self._present = not self._present
        action = "release" if self._present else "suppress"
        done = await intel(self._settings, action, "ip:45.9.9.10", "--note", "a rebuild")
        assert done.returncode == 0, done.stderr
        wanted = self._present
        await wait_for(lambda: _is(_blocks(self._client, "45.9.9.10"), wanted), timeout=10,
                       interval=0.1)


async def _is(check, wanted: bool) -> bool:
    return await check == wanted


async def _not(check) -> bool:
    return not await check


async def test_a_held_or_suppressed_address_keeps_the_networks_around_it_out(house, sql):
    settings, client, _, served, base = house
    db = client.app[DATABASE]
    flow = {"event_type": "flow", "src_ip": "192.168.1.20", "dest_ip": "8.8.8.8",
            "proto": "UDP"}
    await plant(db, CROWD, [flow], datetime.now(timezone.utc) - timedelta(days=2))
    await db.execute("UPDATE routers SET registered_at = now() - interval '4 days'")
    await pack(db)
    served.bodies["/resolver.txt"] = (200, b"8.8.8.8\n", {})
    served.bodies["/nets.txt"] = (200, b"8.8.0.0/16\n45.20.0.0/16\n", {})
    for name in ("resolver", "nets"):
        assert (await intel(settings, "add", name, f"{base}{name}.txt", "--format",
                            "plain")).returncode == 0
    assert (await intel(settings, "fetch")).returncode == 0
    assert "8.8.8.8\theld\t12" in (await intel(settings, "decisions")).stdout
    document, _ = await intel_document(client, OTHER)
    assert [e["address"] for e in document["block"]] == ["45.20.0.0/16"]
    # A suppressed address takes the networks that hold it out of every document too.
    done = await intel(settings, "suppress", "ip:45.20.1.1", "--note", "our partner's")
    assert done.returncode == 0, done.stderr
    await wait_for(lambda: _not(_blocks(client, "45.20.0.0/16")), timeout=10, interval=0.1)
    # An operator who releases the network has it delivered whatever it holds.
    assert (await intel(settings, "release", "network:8.8.0.0/16", "--note",
                        "checked")).returncode == 0
    await wait_for(lambda: _blocks(client, "8.8.0.0/16"), timeout=10, interval=0.1)


async def test_a_value_the_fleet_saw_weeks_ago_is_held_not_told_to_every_household(house, sql):
    settings, client, inbox, served, base = house
    db = client.app[DATABASE]
    await plant(db, CROWD, ["reused.example"], datetime.now(timezone.utc) - timedelta(days=20))
    await db.execute("UPDATE routers SET registered_at = now() - interval '30 days'")
    await pack(db)
    for router in CROWD:
        assert subscriptions(settings, "owner", router, "--user", f"u-{router[-2:]}",
                             "--email", f"u{router[-2:]}@example.org").returncode == 0
    served.bodies["/old.txt"] = (200, b"reused.example\n", {})
    await intel(settings, "add", "old", f"{base}old.txt", "--format", "plain")
    assert (await intel(settings, "fetch")).returncode == 0
    decisions = (await intel(settings, "decisions")).stdout
    assert "reused.example\theld\t12" in decisions and "over the days hunted" in decisions
    assert sql.value("SELECT count(*) FROM intel_sightings") == 0
    assert sql.value("SELECT count(*) FROM notifications") == 0


async def test_an_earlier_key_holders_sightings_are_not_told_to_the_owner(house, sql):
    settings, client, inbox, served, base = house
    db = client.app[DATABASE]
    squatted, kept = "02:11:00:00:0e:01", "02:11:00:00:0e:02"
    await plant(db, [squatted, kept], ["c2.squat.example"],
                datetime.now(timezone.utc) - timedelta(days=2))
    await pack(db)
    # The squatter's enrollment was reset and the real router enrolled since; the other
    # router has held its key all along.
    sql.rows("INSERT INTO router_keys (mac, key_hash, issued_at, issued_by) VALUES "
             "('02:11:00:00:0e:01', '\\x00', now(), 'enrollment'), "
             "('02:11:00:00:0e:02', '\\x00', now() - interval '9 days', 'enrollment')")
    for router in (squatted, kept):
        assert subscriptions(settings, "owner", router, "--user", f"u-{router[-2:]}",
                             "--email", f"u{router[-2:]}@example.org").returncode == 0
    served.bodies["/squat.txt"] = (200, b"c2.squat.example\n", {})
    await intel(settings, "add", "squat", f"{base}squat.txt", "--format", "plain")
    assert (await intel(settings, "fetch")).returncode == 0
    assert sql.value("SELECT count(*) FROM intel_sightings") == 2
    assert sql.rows("SELECT metadata->>'router' FROM notifications") == [(kept,)]


async def test_fresh_macs_cannot_get_a_real_indicator_held(house, sql):
    settings, client, _, served, base = house
    victim, sybils = "02:11:00:00:0d:00", [f"02:11:00:00:0d:{n:02x}" for n in range(1, 13)]
    for router in [victim, *sybils]:
        await upload(client, router, [dns("c2.sybil-test.example")])
    served.bodies["/c2.txt"] = (200, b"c2.sybil-test.example\n", {})
    await intel(settings, "add", "c2", f"{base}c2.txt", "--format", "plain")
    assert (await intel(settings, "fetch")).returncode == 0
    assert "held" not in (await intel(settings, "decisions")).stdout
    sighted = orjson.loads((await intel(settings, "sightings", "--json")).stdout)
    assert victim in {s["mac"] for s in sighted["sightings"]}


def test_block_entries_never_overlap():
    document = build_document([
        {"kind": "ip", "value": "45.33.32.66", "expires_at": "2027-01-01T00:00:00Z"},
        {"kind": "network", "value": "45.33.32.0/24", "expires_at": "2026-12-01T00:00:00Z"},
        {"kind": "network", "value": "45.33.33.0/24", "expires_at": "2026-12-02T00:00:00Z"},
        {"kind": "ip", "value": "2a00:1450::1", "expires_at": "2026-12-03T00:00:00Z"},
        {"kind": "network", "value": "2a00:1450::1/128", "expires_at": "2026-12-05T00:00:00Z"}])
    # Merged, each expiring with the last of its parts, rounded up to a Monday (UTC).
    assert [(e["address"], e["expires_at"]) for e in document["block"]] == [
        ("45.33.32.0/23", "2027-01-04T00:00:00Z"), ("2a00:1450::1", "2026-12-07T00:00:00Z")]


def test_a_zip_of_many_entries_is_refused_before_it_is_read():
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as written:
        for n in range(3):
            written.writestr(f"{n}.txt", "a.example\n")
    with pytest.raises(FetchError, match="more than one file"):
        _capped(archive.getvalue(), 10_000)


def test_a_zip_whose_record_understates_its_directory_is_refused_before_it_is_read():
    """Its end record says one entry; its directory holds thousands (zipfile would read them
    all: 1.4 million took 800 MB in a review)."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as written:
        for n in range(3_000):
            written.writestr(f"{n:08}.txt", "")
    data = bytearray(archive.getvalue())
    end = data.rfind(b"PK\x05\x06")
    data[end + 8:end + 12] = (1).to_bytes(2, "little") * 2
    with pytest.raises(FetchError, match="more than one file"):
        _capped(bytes(data), 10_000)


def test_a_feed_of_too_many_lines_or_objects_is_refused_before_they_are_made():
    with pytest.raises(FeedError, match="2,000,001 lines, more than 2,000,000"):
        read("plain", b"a\n" * 2_000_000 + b"a")
    assert len(read("plain", b"a.example\n" * 2_000_000).entries) == 1  # at most: taken
    with pytest.raises(FeedError, match="objects and arrays"):
        read("threatfox", b'{"data":[' + b"{}," * 2_000_000 + b"{}]}")
    # A confidence of `true` is no number (Python counts it as 1): the feed's default.
    version = read("threatfox", orjson.dumps({"data": [
        {"ioc_type": "domain", "ioc_value": "c2.example", "confidence_level": True}]}))
    assert [e.confidence for e in version.entries.values()] == [None]


async def test_a_fetch_is_timed_whole_across_its_redirects(aiohttp_server):
    async def slow_redirect(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(1.5)
        hop = int(request.match_info["hop"])
        raise web.HTTPFound(f"/hop/{hop + 1}")
    app = web.Application()
    app.router.add_get("/hop/{hop}", slow_redirect)
    server = await aiohttp_server(app, host="127.0.0.1")
    started = time.monotonic()
    with pytest.raises(FetchError, match="within 2 s"):
        await fetch(str(server.make_url("/hop/0")), None, None, 10_000, 2)
    # Timed a hop at a time, its 4 hops (MAX_REDIRECTS + 1) would take 6 s and fail as too
    # many redirects; the margin is for a loaded machine's late timer.
    assert time.monotonic() - started < 5


async def test_a_misp_feed_whose_events_fail_keeps_its_previous_version(house, sql):
    settings, client, _, served, base = house
    uuids = ["5f1e0000-0000-4000-8000-00000000000" + str(n) for n in range(3)]
    served.bodies["/misp/manifest.json"] = (200, orjson.dumps(
        {uuid: {"timestamp": str(1700000000 + n)} for n, uuid in enumerate(uuids)}), {})
    for n, uuid in enumerate(uuids):
        served.bodies[f"/misp/{uuid}.json"] = (200, orjson.dumps({"Event": {"Attribute": [
            {"type": "domain", "value": f"c2-{n}.misp.example", "to_ids": True}]}}), {})
    await intel(settings, "add", "misp", f"{base}misp/manifest.json", "--format", "misp")
    assert "misp: 3 indicators" in (await intel(settings, "fetch")).stdout
    served.bodies[f"/misp/{uuids[1]}.json"] = (503, b"slow down", {})
    served.bodies["/misp/manifest.json"] = (200, served.bodies["/misp/manifest.json"][1]
                                            + b" ", {})  # a new ETag: fetched again
    done = await intel(settings, "fetch")
    assert done.returncode == 1 and "HTTP 503" in done.stdout
    assert sql.value("SELECT count(*) FROM intel_indicators WHERE feed = 'misp'") == 3


async def test_a_feed_server_cannot_write_escapes_to_an_operator_terminal(house, sql):
    """A raw server (aiohttp refuses to send it) answers with escapes in its reason phrase."""
    settings, client, _, served, base = house

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 500 \x1b[31mRED\x1b[0m\x07 x\r\nContent-Length: 0\r\n"
                     b"Connection: close\r\n\r\n")
        await writer.drain()
        writer.close()
    raw = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = raw.sockets[0].getsockname()[1]
    try:
        await intel(settings, "add", "esc", f"http://127.0.0.1:{port}/esc.txt", "--format",
                    "plain")
        done = await intel(settings, "fetch")
        listed = (await intel(settings, "list")).stdout
    finally:
        raw.close()
    assert "RED" in done.stdout and "RED" in listed
    assert "\x1b" not in done.stdout + listed and "\x07" not in done.stdout + listed


async def test_no_feed_pushes_another_out_of_the_budget(house, sql):
    settings, client, _, served, base = house
    served.bodies["/loud.json"] = (200, orjson.dumps({"data": [
        {"ioc_type": "domain", "ioc_value": f"c2-{n}.loud.example", "confidence_level": 100}
        for n in range(10)]}), {})
    served.bodies["/quiet.txt"] = (200, b"one.quiet.example\ntwo.quiet.example\n", {})
    await intel(settings, "add", "loud", f"{base}loud.json", "--format", "threatfox")
    await intel(settings, "add", "quiet", f"{base}quiet.txt", "--format", "plain")
    assert (await intel(settings, "fetch")).returncode == 0
    rows = await intel_db.delivered(client.app[DATABASE], [], 4, timedelta(hours=72),
                                    True)
    assert sorted(value for _, value, _ in rows if "quiet" in value) == [
        "example.quiet.one", "example.quiet.two"]
    assert len(rows) == 4


def test_a_feed_value_no_database_can_take_or_too_wide_is_refused():
    assert feed_value("network", "2a00::%1/64") is None
    assert feed_value("domain", "org") is None and feed_value("domain", "a.org") == "org.a"


def _get(url: str, **headers: str) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status, answer.headers["ETag"], answer.read()


@pytest.mark.drill
def test_every_http_worker_answers_a_delta(tmp_path, database):
    """Two HTTP workers: a router's poll may reach either, and each knows each version."""
    server = ServerRunner(database, tmp_path, HTTP_WORKERS="2").start(timeout=120)
    try:
        env = command_env(settings_for(database, tmp_path))
        feed = tmp_path / "feed.txt"
        # A bulk that stays: a delta is answered only when smaller than the whole document.
        feed.write_text("".join(f"kept{n}.delta.example\n" for n in range(40))
                        + "one.delta.example\ntwo.delta.example\n")
        assert router_backend(env, "intel", "import", str(feed), "--feed", "f", "--format",
                              "plain").returncode == 0
        before = _until(lambda: _holding(server.url, b"two.delta.example"))
        assert router_backend(env, "intel", "suppress", "domain:one.delta.example",
                              "--note", "test").returncode == 0
        # Until a worker has heard of the change it answers 304 (its document is the one
        # named); once it has, a delta, from whichever process served `before`: never the
        # whole document.
        deltas = []
        while len(deltas) < 8:
            status, body = _until(lambda: _delta(server.url, before))
            assert b'"delta_from"' in body and b'"from_serial"' in body, body[:200]
            deltas.append(status)
    finally:
        server.stop()


def _holding(url: str, name: bytes) -> str | None:
    """The ETag of the document served, once it holds `name`."""
    _, etag, body = _get(f"{url}/rules/intel", **{"X-ID": OTHER})
    return etag if base64.b64encode(name) in body else None


def _delta(url: str, since: str) -> tuple[int, bytes] | None:
    request = urllib.request.Request(f"{url}/rules/intel?delta=1",
                                     headers={"X-ID": OTHER, "If-None-Match": since})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        if error.code == 304:
            return None
        raise


def _until(check, timeout: float = 60.0):
    """`check()`'s first true value, asked every 0.1 s; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s")
