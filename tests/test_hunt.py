"""The hunt (issue 52): real EVE from the corpus spread over many routers, uploaded over HTTP
as the agent sends it; every router holding an indicator is found and no other, for every
kind and for a domain's names under it; the horizon beyond the records; the command, the
console page and the record of every hunt. The corpus has no TLS, HTTP or file records: those
are the corpus's flows with Suricata's tls, http and fileinfo objects added (fields as
Suricata 7 writes them)."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import pwd
import random
import re

from datetime import datetime, timedelta, timezone

import orjson
import pytest

from server.console.hunting import HUNTS_PER_MINUTE, HuntGate, HuntRefused
from server.hunt.budget import HuntBudget
from server.hunt.indexer import index_pending
from server.hunt.search import Hunt, run_hunt
from server.jobs.retention import run_retention
from server.telemetry.indicators import NAMES_PER_RECORD, indicator
from server.hunt.postings import POSTINGS_FREE, POSTINGS_PER_RECORD
from server.typedefs import DATABASE, SETTINGS
from testkit.corpus import corpus_path
from testkit.database import command_env
from tests.commands import router_backend
from engine.addresses import is_public
from tests.test_console import OPERATOR, SUPPORT, console_settings, sign_in

ROUTERS = 12


def mac(n: int) -> str:
    return f"aa:bb:cc:52:00:{n:02x}"


def corpus_records() -> list[dict]:
    records = []
    for name in ("lab-sensor-eve.json", "lab-zeus-eve.json"):
        with corpus_path("eve", name).open("rb") as eve:
            records += [orjson.loads(line) for line in eve if line.strip()]
    flows = [r for r in records if r.get("event_type") == "flow"]
    for n, flow in enumerate(flows[:60]):  # protocol records on the corpus's own flows
        kind = ("tls", "http", "fileinfo")[n % 3]
        record = {**flow, "event_type": kind}
        if kind == "tls":
            record["tls"] = {"sni": f"c{n % 7}.tracker.example.net",
                             "ja3": {"hash": hashlib.md5(b"ja3%d" % (n % 5)).hexdigest()},
                             "ja3s": {"hash": hashlib.md5(b"ja3s%d" % (n % 4)).hexdigest()},
                             "ja4": f"t13d1516h2_{n % 6:012x}_b186095e22b6"}
        elif kind == "http":
            record["http"] = {"hostname": f"WWW.Download{n % 4}.Example.ORG."}
        else:
            record["fileinfo"] = {"sha256": hashlib.sha256(b"file%d" % (n % 6)).hexdigest()}
        records.append(record)
    return records


def spread(records: list[dict]) -> dict[str, list[dict]]:
    """Each record to 1 to 3 routers, drawn with a fixed seed."""
    rng = random.Random(52)
    held: dict[str, list[dict]] = {mac(n): [] for n in range(ROUTERS)}
    for record in records:
        for n in rng.sample(range(ROUTERS), rng.randint(1, 3)):
            held[mac(n)].append(record)
    return held


def expected(held: dict[str, list[dict]]) -> dict[tuple[str, str], dict[str, int]]:
    """(kind, value) -> {router: how many of its records carry it}, worked out here from the
    records' fields as EVE names them (independently of the service's extraction)."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for router, records in held.items():
        for r in records:
            values = set()
            for field in ("src_ip", "dest_ip"):
                if r.get(field):
                    values.add(("ip", ipaddress.ip_address(r[field]).compressed))
            values.add(("sid", (r.get("alert") or {}).get("signature_id")))
            dns = r.get("dns") or {}
            names = [dns.get("rrname")] + [q.get("rrname") for q in dns.get("queries", [])] \
                + [a.get("rrname") for a in dns.get("answers", [])]
            tls = r.get("tls") or {}
            names += [tls.get("sni"), (r.get("http") or {}).get("hostname")]
            values |= {("domain", name.lower().rstrip(".")) for name in names if name}
            values |= {("ja3", (tls.get(f) or {}).get("hash")) for f in ("ja3", "ja3s")}
            values.add(("ja4", tls.get("ja4")))
            values.add(("sha256", (r.get("fileinfo") or {}).get("sha256")))
            for kind, value in values:
                if value:
                    counts = found.setdefault((kind, str(value)), {})
                    counts[router] = counts.get(router, 0) + 1
    return found


async def upload(client, router: str, records: list[dict]) -> None:
    for path, chosen in (("/log/events", [r for r in records if r.get("event_type") == "alert"]),
                         ("/log/cfm", [r for r in records if r.get("event_type") != "alert"])):
        if chosen:
            body = b"\n".join(orjson.dumps(r) for r in chosen)
            answer = await client.post(path, data=body, headers={
                "X-ID": router, "Content-Type": "application/x-ndjson"})
            assert answer.status == 200, await answer.text()
    await indexed(client)


async def indexed(client) -> None:
    """The uploads acknowledged so far, indexed (as the indexer's loop does within
    HUNT_INDEX_SECONDS, and every hunt of the command and the console first)."""
    done = await index_pending(client.app[DATABASE],
                               HuntBudget.from_settings(client.app[SETTINGS]), 30)
    assert done.left == 0


@pytest.fixture
async def fleet(make_client, settings):
    client = await make_client(settings)
    held = spread(corpus_records())
    for router, records in held.items():
        await upload(client, router, records)
    return settings, client, held


def hunt(settings, *args: str, **env: str) -> dict:
    done = router_backend(command_env(settings, **env), "hunt", *args, "--json", "--limit",
                          "5000")
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


async def test_every_router_holding_an_indicator_is_found_and_no_other(fleet):
    settings, _, held = fleet
    truth = expected(held)
    rng = random.Random(7)
    kinds = {}
    for kind, value in truth:
        kinds.setdefault(kind, []).append(value)
    assert set(kinds) == {"ip", "domain", "ja3", "ja4", "sid", "sha256"}
    for kind, values in sorted(kinds.items()):
        sample = rng.sample(sorted(values), min(6, len(values)))
        if kind == "domain":  # one at a time: each finds every name under it
            for value in sample:
                answer = hunt(settings, "--domain", value)
                records = {m["mac"]: m["records"] for m in answer["matches"]}
                wanted = {}
                for (k, name), counts in truth.items():
                    if k == "domain" and (name == value or name.endswith("." + value)):
                        for router, count in counts.items():
                            wanted[router] = wanted.get(router, 0) + count
                assert set(records) == set(wanted), (kind, value)
                assert answer["match_count"] == len(records)
            continue
        # One hunt of the kind's sample (one command, not one a value), each match told
        # apart by the indicator it names.
        answer = hunt(settings, *(argument for value in sample
                                  for argument in (f"--{kind}", str(value))))
        for value in sample:
            records = {m["mac"]: m["records"] for m in answer["matches"]
                       if m["indicator"] == str(value)}
            assert records == truth[(kind, value)], (kind, value)
        assert answer["match_count"] == sum(len(truth[(kind, value)]) for value in sample)


async def test_a_domain_finds_every_name_under_it_and_nothing_beside_it(fleet):
    settings, _, held = fleet
    truth = expected(held)
    under = {router for (kind, value), counts in truth.items()
             if kind == "domain" and value.endswith(".tracker.example.net")
             for router in counts}
    answer = hunt(settings, "--domain", "Tracker.Example.NET.")
    assert {m["mac"] for m in answer["matches"]} == under and under
    assert hunt(settings, "--domain", "racker.example.net")["match_count"] == 0


async def test_indicators_combine_and_the_answer_is_one_object(fleet, tmp_path):
    settings, _, held = fleet
    truth = expected(held)
    sid = next(value for kind, value in truth if kind == "sid")
    sha = next(value for kind, value in truth if kind == "sha256")
    listing = tmp_path / "indicators.txt"
    listing.write_text(f"# from an advisory\nsid {sid}\n{sha}\n\ndownload1.example.org\n")
    answer = hunt(settings, "--file", str(listing), "--days", "7")
    assert set(answer) >= {"searched", "matches", "match_count"}
    assert answer["searched"]["days"] == 7
    found = {(m["kind"], m["mac"]) for m in answer["matches"]}
    assert {("sid", r) for r in truth[("sid", sid)]} <= found
    assert {("sha256", r) for r in truth[("sha256", sha)]} <= found
    assert {("domain", r) for (k, v), counts in truth.items()
            if k == "domain" and v.endswith("download1.example.org") for r in counts} <= found
    match = answer["matches"][0]
    assert set(match) >= {"mac", "kind", "indicator", "first_seen", "last_seen", "records"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", match["first_seen"])
    table = router_backend(command_env(settings), "hunt", "--sid", sid)
    assert table.returncode == 0 and table.stdout.splitlines()[1].startswith("mac\tkind")


@pytest.mark.parametrize("args", [("--ip", "10.0.0.300"), ("--domain", "exa mple.com"),
                                  ("--ja3", "xyz"), ("--sha256", "ab"), ("--sid", "-4"),
                                  ("--ja4", "nope"), ("--ip", "fe80::1%eth0"), (),
                                  ("--sid", "\u00b2"), ("--sid", "9" * 5000),
                                  ("--domain", "evil\n.example.com"),
                                  ("--domain", "\u212aelvin.example.com"),
                                  ("--sid", "1", "--days", "401")])
def test_a_malformed_indicator_exits_2_with_one_line(settings, args):
    done = router_backend(command_env(settings), "hunt", *args)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


async def test_every_hunt_is_recorded_with_who_asked(fleet):
    settings, client, _ = fleet
    hunt(settings, "--ip", "192.0.2.1")
    log = router_backend(command_env(settings), "hunt", "--log", "--json")
    entries = orjson.loads(log.stdout)
    assert entries[0]["via"] == "command" and entries[0]["asked_by"].startswith("shell")
    assert entries[0]["indicators"] == [{"kind": "ip", "value": "192.0.2.1"}]


async def test_the_index_outlives_the_records(fleet, sql, distributed):
    """Past RETENTION_DAYS the records are gone; the hunt still names the routers, days and
    counts, and says the records expired."""
    if distributed:
        pytest.skip("ageing the rows with UPDATE ... SET t = t - interval is refused by Citus "
                    "(a STABLE function with a column reference); retention itself is "
                    "tested on Citus by tests/test_retention.py")
    settings, client, held = fleet
    truth = expected(held)
    sid, routers = next((v, set(r)) for (k, v), r in truth.items() if k == "sid")
    for table, column in (("telemetry_chunks", "received_at"), ("telemetry_alerts", "hour"),
                          ("telemetry_flows", "hour")):
        sql.rows(f"UPDATE {table} SET {column} = {column} - interval '40 days'")
    sql.rows("UPDATE hunt_postings SET day = day - interval '40 days', "
             "first_seen = first_seen - interval '40 days', "
             "last_seen = last_seen - interval '40 days'")
    detail = await run_retention(client.app[DATABASE], 30, 400, hunt_days=400)
    assert detail["removed"]["telemetry_chunks"]["rows_deleted"] > 0
    assert sql.value("SELECT count(*) FROM telemetry_chunks") == 0
    assert hunt(settings, "--sid", sid)["match_count"] == 0  # the last 30 days
    kept = {"DATA_RETENTION_ENABLED": "true"}  # (while it is off, no record expires)
    answer = hunt(settings, "--sid", sid, "--days", "60", **kept)
    assert {m["mac"] for m in answer["matches"]} == routers
    assert all(m["records_expired"] for m in answer["matches"])
    assert not any(m["records_expired"] for m in hunt(settings, "--sid", sid, "--days",
                                                        "60")["matches"])
    exported = router_backend(command_env(settings), "telemetry", "export", "--mac",
                              sorted(routers)[0], "--match", f"sid:{sid}")
    assert exported.returncode == 0 and exported.stdout == ""
    await run_retention(client.app[DATABASE], 30, 400, hunt_days=35)
    assert hunt(settings, "--sid", sid, "--days", "60")["match_count"] == 0


async def test_export_match_prints_the_records_that_carry_it(fleet):
    settings, _, held = fleet
    router = mac(3)
    wanted = next(r["dns"]["rrname"] for r in held[router] if (r.get("dns") or {}).get("rrname"))
    done = router_backend(command_env(settings), "telemetry", "export", "--mac", router,
                          "--match", f"domain:{wanted}")
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert lines and all(wanted.lower().rstrip(".") in orjson.dumps(r).decode().lower()
                         for r in lines)
    bad = router_backend(command_env(settings), "telemetry", "export", "--mac", router,
                         "--match", "colour:blue")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


async def test_the_console_hunts_for_signed_in_users_and_records_them(make_client, settings,
                                                                      sql):
    client = await make_client(console_settings(settings))
    held = spread(corpus_records())
    for router in (mac(0), mac(1)):
        await upload(client, router, held[router])
    assert (await client.get("/console/hunt", allow_redirects=False)).status in (302, 303)
    assert (await sign_in(client, SUPPORT)).status == 303
    page = await client.get("/console/hunt")
    token = re.search(r'name="csrf" value="([^"]+)"', await page.text()).group(1)
    address = next(a for r in held[mac(0)] for a in (r.get("src_ip"), r.get("dest_ip"))
                   if a and is_public(a))
    answer = await client.post("/console/hunt", data={"csrf": token, "indicators":
                                                      f"ip {address}", "days": "30"})
    text = await answer.text()
    assert answer.status == 200 and f"/console/routers/{mac(0)}" in text
    assert "drill-downs made" not in text  # the record is for operators
    assert sql.rows("SELECT asked_by, via FROM hunt_log") == [(f"console:{SUPPORT[0]}",
                                                                "console")]
    records = await client.get(f"/console/routers/{mac(0)}/records?match=ip:{address}")
    assert records.status == 200 and address in await records.text()
    assert sql.rows("SELECT asked_by, router::text, matches > 0 FROM hunt_log "
                    "ORDER BY id DESC LIMIT 1") == [(f"console:{SUPPORT[0]}", mac(0), True)]
    refused = await client.post("/console/hunt", data={"csrf": token, "indicators": "nonsense",
                                                       "days": "30"})
    assert refused.status == 400 and "give its kind" in await refused.text()
    for days in ("\u00b2", "0", "401", "9" * 40):
        answer = await client.post("/console/hunt", data={"csrf": token, "indicators": "sid 1",
                                                          "days": days})
        assert answer.status == 400 and "days back is 1 to 400" in await answer.text(), days
    for bad in ("colour:blue", "ip:999.1.1.1", "", "sid:" + "9" * 40, "sid:\u00b2",
                "domain:evil\n.example.com", "domain:com", "domain:COM."):
        answer = await client.get(f"/console/routers/{mac(0)}/records", params={"match": bad})
        assert answer.status == 400 and "Traceback" not in await answer.text(), bad
    await client.post("/console/sign-out", data={"csrf": token})
    assert (await sign_in(client, OPERATOR)).status == 303
    assert "drill-downs made" in await (await client.get("/console/hunt")).text()


async def test_support_cannot_hunt_households_private_networks(make_client, settings, sql):
    """The red team's sixth attack: `network 192.168.0.0/16` found 101 routers, and its
    drill-down their households' DNS names. Support is refused a private address or network,
    and its drill-down; an operator may, and is recorded."""
    client = await make_client(console_settings(settings))
    await upload(client, mac(0), [dns("family-photos.example")])
    assert (await sign_in(client, SUPPORT)).status == 303
    page = await client.get("/console/hunt")
    token = re.search(r'name="csrf" value="([^"]+)"', await page.text()).group(1)
    for asked in ("network 192.168.0.0/16", "ip 192.168.1.20", "network 10.1.0.0/24",
                  "ip 172.17.0.5\nsid 1", "ip 2002:c0a8:114::1", "ip fd00::1"):
        answer = await client.post("/console/hunt", data={"csrf": token, "indicators": asked,
                                                          "days": "30"})
        assert answer.status == 403 and "not a public address" in await answer.text(), asked
    drill = await client.get(f"/console/routers/{mac(0)}/records?match=ip:192.168.1.20")
    assert drill.status == 403
    assert sql.value("SELECT count(*) FROM hunt_log") == 0
    allowed = await client.post("/console/hunt", data={"csrf": token, "indicators":
                                                       "network 45.33.32.0/24", "days": "30"})
    assert allowed.status == 200
    await client.post("/console/sign-out", data={"csrf": token})
    assert (await sign_in(client, OPERATOR)).status == 303
    token = re.search(r'name="csrf" value="([^"]+)"',
                      await (await client.get("/console/hunt")).text()).group(1)
    answer = await client.post("/console/hunt", data={"csrf": token, "indicators":
                                                      "ip 192.168.1.20", "days": "30"})
    assert answer.status == 200 and f"/console/routers/{mac(0)}" in await answer.text()
    assert sql.rows("SELECT asked_by FROM hunt_log ORDER BY id DESC LIMIT 1") == [
        (f"console:{OPERATOR[0]}",)]
    drill = await client.get(f"/console/routers/{mac(0)}/records?match=ip:192.168.1.20")
    assert drill.status == 200


async def test_a_value_at_very_many_routers_reads_a_bounded_number_of_postings(make_client,
                                                                               settings, sql):
    """Past its bound of postings still in rows a hunt reads the earliest, says its count is
    a lower bound, and still gives each match shown its whole window; packed, the count is
    exact."""
    client = await make_client(settings)
    sql.rows("""INSERT INTO routers (mac)
        SELECT ('02:00:00:00:' || lpad(to_hex(n / 256), 2, '0') || ':'
                || lpad(to_hex(n % 256), 2, '0'))::macaddr FROM generate_series(1, 100) AS n""")
    sql.rows("""INSERT INTO hunt_postings (day, kind, value, mac, first_seen, last_seen, records)
        SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - back * interval '1 day',
               's', '2013028', ('02:00:00:00:' || lpad(to_hex(n / 256), 2, '0') || ':'
                                || lpad(to_hex(n % 256), 2, '0'))::macaddr,
               now() - back * interval '1 day', now() - back * interval '1 day', 2
        FROM generate_series(0, 4) AS back, generate_series(1, 100) AS n""")
    wanted = indicator("sid", "2013028")
    bounded = Hunt((wanted,), days=30, limit=10, unpacked_reads=250)
    answer = await run_hunt(client.app[DATABASE], bounded, "test", "command", 30)
    assert answer["match_count"] == 100 and not answer["match_count_exact"]
    assert answer["shown"] == 10 and answer["more"]
    assert all(len(m["days"]) == 5 and m["records"] == 10 for m in answer["matches"])
    whole = await run_hunt(client.app[DATABASE], Hunt((wanted,), days=30, limit=10),
                           "test", "command", 30)
    assert whole["match_count"] == 100 and whole["match_count_exact"]
    assert [m["mac"] for m in whole["matches"]] == [m["mac"] for m in answer["matches"]]


def dns(name: str) -> dict:
    return {"event_type": "dns", "src_ip": "192.168.1.20", "dest_ip": "192.0.2.53",
            "dns": {"type": "query", "rrname": name, "rrtype": "A"}}


async def test_one_router_looking_up_many_names_under_a_domain_hides_no_other(make_client,
                                                                              settings):
    """A hostile router looks up a thousand names under a domain (review of issue 52: 20,001
    of them used up a hunt's postings and the routers that saw the domain went missing). A
    domain posts once a day per router however many names it looked up under it, so a hunt
    reading only 50 postings still finds every router, the count exact."""
    client = await make_client(settings)
    await upload(client, mac(40), [dns(f"a{n:06d}.c2.evil.example") for n in range(1000)])
    honest = {mac(41): "c2.evil.example", mac(42): "C2.Evil.Example.",
              mac(43): "www.c2.evil.example", mac(44): "x.y.www.c2.evil.example"}
    for router, name in honest.items():
        await upload(client, router, [dns(name)])
    await upload(client, mac(45), [dns("c2.evil.example.net"), dns("notc2.evil.example")])
    bounded = Hunt((indicator("domain", "c2.evil.example"),), days=30, unpacked_reads=50)
    answer = await run_hunt(client.app[DATABASE], bounded, "test", "command", None)
    assert answer["match_count_exact"] and answer["match_count"] == 5
    records = {m["mac"]: m["records"] for m in answer["matches"]}
    assert records == {mac(40): 1000, **{router: 1 for router in honest}}
    deep = await run_hunt(client.app[DATABASE], Hunt((indicator("domain", "www.c2.evil.example"),),
                                                     days=30), "test", "command", None)
    assert {m["mac"] for m in deep["matches"]} == {mac(43), mac(44)}


async def test_overlapping_indicators_each_find_their_routers_in_any_order(make_client,
                                                                           settings):
    client = await make_client(settings)
    await upload(client, mac(50), [dns("www.shop.example")])
    await upload(client, mac(51), [dns("shop.example")])
    wide, narrow = indicator("domain", "shop.example"), indicator("domain", "www.shop.example")
    for order in ((wide, narrow), (narrow, wide)):
        answer = await run_hunt(client.app[DATABASE], Hunt(order, days=30), "test", "command",
                                None)
        assert sorted((m["indicator"], m["mac"]) for m in answer["matches"]) == [
            ("shop.example", mac(50)), ("shop.example", mac(51)),
            ("www.shop.example", mac(50))]
        assert answer["match_count"] == 3


async def test_the_hunt_log_names_the_login_and_pages(fleet, tmp_path):
    """The shell's name comes from the uid, not LOGNAME or USER (which anybody sets); the log
    pages past its newest entries; an indicator file that is not UTF-8 is one line, exit 2."""
    settings, _, _ = fleet
    forged = command_env(settings, LOGNAME="olga\nconsole:sam", USER="olga")
    for n in range(3):
        assert router_backend(forged, "hunt", "--sid", str(n + 1)).returncode == 0
    log = router_backend(command_env(settings), "hunt", "--log", "--json", "--limit", "2",
                         "--skip", "1")
    entries = orjson.loads(log.stdout)
    assert [e["indicators"][0]["value"] for e in entries] == ["2", "1"]
    assert {e["asked_by"] for e in entries} == {f"shell:{pwd.getpwuid(os.getuid()).pw_name}"}
    binary = tmp_path / "iocs.txt"
    binary.write_bytes(b"sid 1\n\xff\xfe\n")
    done = router_backend(command_env(settings), "hunt", "--file", str(binary))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "UTF-8" in done.stderr
    for content, why in ((b"", "it is empty"), (b"# none\n\n", "only blank lines")):
        binary.write_bytes(content)  # a new user's finding: "name at least one indicator"
        done = router_backend(command_env(settings), "hunt", "--file", str(binary))
        assert done.returncode == 2 and "names no indicator" in done.stderr, done.stderr
        assert why in done.stderr and done.stderr.count("\n") == 1


async def test_a_console_user_hunts_at_most_so_often(make_client, settings):
    client = await make_client(console_settings(settings))
    assert (await sign_in(client, SUPPORT)).status == 303
    page = await client.get("/console/hunt")
    token = re.search(r'name="csrf" value="([^"]+)"', await page.text()).group(1)
    statuses = [(await client.post("/console/hunt", data={
        "csrf": token, "indicators": f"sid {n + 1}", "days": "30"})).status
        for n in range(HUNTS_PER_MINUTE + 1)]
    assert statuses == [200] * HUNTS_PER_MINUTE + [429]
    refused = await client.get(f"/console/routers/{mac(0)}/records?match=sid:1")
    assert refused.status == 429 and "hunts a minute" in await refused.text()


async def test_a_record_of_thousands_of_names_adds_a_few_postings(make_client, settings, sql):
    """Review of issue 52: one DNS record of 14,500 deep names added 116,004 postings and
    half a gigabyte to a worker. A record's first NAMES_PER_RECORD names are indexed, and an
    upload adds at most POSTINGS_FREE + POSTINGS_PER_RECORD a record distinct values; every
    record is stored, and the next upload is indexed as usual."""
    client = await make_client(settings)
    hostile = [{**dns("decoy.example"), "dns": {"type": "answer", "rrname": "decoy.example",
                                                 "answers": [{"rrname": f"x.x.x.x.x.x.x.n{r}-{i}.com",
                                                              "rrtype": "A"} for i in range(300)]}}
               for r in range(50)]
    await upload(client, mac(60), hostile)
    postings = sql.value("SELECT count(*) FROM hunt_postings WHERE mac = %s", (mac(60),))
    assert postings <= POSTINGS_FREE + 50 * POSTINGS_PER_RECORD
    assert sql.value("SELECT sum(records) FROM telemetry_chunks WHERE mac = %s",
                     (mac(60),)) == 50
    assert NAMES_PER_RECORD < 300
    await upload(client, mac(60), [dns("later.example")])
    answer = await run_hunt(client.app[DATABASE], Hunt((indicator("domain", "later.example"),),
                                                       days=30), "test", "command", None)
    assert [m["mac"] for m in answer["matches"]] == [mac(60)]


async def test_a_hunt_can_end_before_today(make_client, settings, sql):
    """Past a count stopped at the bound (many routers saw a value lately), the older days
    are read by a hunt ending before them."""
    client = await make_client(settings)
    today = datetime.now(timezone.utc).date()
    old_day = datetime.combine(today - timedelta(days=12), datetime.min.time(), timezone.utc)
    seen = old_day + timedelta(hours=9)
    sql.rows("INSERT INTO routers (mac) VALUES (%s)", (mac(70),))
    sql.rows("INSERT INTO hunt_postings (day, kind, value, mac, first_seen, last_seen, "
             "records) VALUES (%s, 'd', 'example.old', %s, %s, %s, 1)",
             (old_day, mac(70), seen, seen))  # (as an upload 12 days ago wrote it)
    await upload(client, mac(71), [dns("old.example")])
    wanted = (indicator("domain", "old.example"),)
    recent = await run_hunt(client.app[DATABASE], Hunt(wanted, 5), "test", "command", None)
    assert [m["mac"] for m in recent["matches"]] == [mac(71)]
    before = Hunt(wanted, 30, until=today - timedelta(days=5))
    older = await run_hunt(client.app[DATABASE], before, "test", "command", None)
    assert [m["mac"] for m in older["matches"]] == [mac(70)]
    assert older["searched"]["to"] == (today - timedelta(days=5)).isoformat()
    done = router_backend(command_env(settings), "hunt", "--domain", "old.example", "--until",
                          (today - timedelta(days=5)).isoformat(), "--json")
    assert [m["mac"] for m in orjson.loads(done.stdout)["matches"]] == [mac(70)]


async def test_one_console_user_holds_one_place_and_long_records_are_cut(make_client,
                                                                         settings):
    gate = HuntGate()
    async with gate.place("sue"):
        with pytest.raises(HuntRefused, match="still under way"):
            async with gate.place("sue"):
                pass
        async with gate.place("olga"):
            with pytest.raises(HuntRefused, match="other hunts"):
                async with gate.place("sam"):
                    pass
    async with gate.place("sue"):
        pass
    gate.threads.shutdown()
    client = await make_client(console_settings(settings))
    record = {**dns("long.example"), "note": "<" * 100_000}
    await upload(client, mac(80), [record])
    assert (await sign_in(client, SUPPORT)).status == 303
    drill_down = f"/console/routers/{mac(80)}/records?match=domain:long.example"
    refused = await client.get(drill_down)  # no hunt of that user's found it
    assert refused.status == 403 and "hunt for domain long.example first" in \
        await refused.text()
    page = await client.get("/console/hunt")
    token = re.search(r'name="csrf" value="([^"]+)"', await page.text()).group(1)
    assert (await client.post("/console/hunt", data={
        "csrf": token, "indicators": "domain long.example", "days": "30"})).status == 200
    page = await client.get(drill_down)
    text = await page.text()
    assert page.status == 200 and "bytes in all" in text and len(text) < 60_000
