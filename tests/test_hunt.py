"""The hunt (issue 52): real EVE from the corpus spread over many routers, uploaded over HTTP
as the agent sends it; every router holding an indicator is found and no other, for every
kind and for a domain's names under it; the horizon beyond the records; the command, the
console page and the record of every hunt. The corpus has no TLS, HTTP or file records: those
are the corpus's flows with Suricata's tls, http and fileinfo objects added (fields as
Suricata 7 writes them)."""

from __future__ import annotations

import hashlib
import ipaddress
import random
import re

import orjson
import pytest

from server.jobs.retention import run_retention
from server.typedefs import DATABASE
from testkit.corpus import corpus_path
from testkit.database import command_env
from testkit.server import router_backend
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


@pytest.fixture
async def fleet(make_client, settings):
    client = await make_client(settings)
    held = spread(corpus_records())
    for router, records in held.items():
        await upload(client, router, records)
    return settings, client, held


def hunt(settings, *args: str) -> dict:
    done = router_backend(command_env(settings), "hunt", *args, "--json", "--limit", "5000")
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
        for value in rng.sample(sorted(values), min(6, len(values))):
            answer = hunt(settings, f"--{kind}", value)
            records = {m["mac"]: m["records"] for m in answer["matches"]}
            if kind == "domain":  # and every name under it
                wanted = {}
                for (k, name), counts in truth.items():
                    if k == "domain" and (name == value or name.endswith("." + value)):
                        for router, count in counts.items():
                            wanted[router] = wanted.get(router, 0) + count
                assert set(records) == set(wanted), (kind, value)
            else:
                assert records == truth[(kind, value)], (kind, value)
            assert answer["match_count"] == len(records)


async def test_a_domain_finds_every_name_under_it_and_nothing_beside_it(fleet):
    settings, _, held = fleet
    truth = expected(held)
    under = {router for (kind, value), counts in truth.items()
             if kind == "domain" and value.endswith(".tracker.example.net")
             for router in counts}
    answer = hunt(settings, "--domain", "Tracker.Example.NET.")
    assert {m["mac"] for m in answer["matches"]} == under and under
    names = {name for m in answer["matches"] for name in m["names"]}
    assert names and all(name.endswith(".tracker.example.net") for name in names)
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
                                  ("--ja4", "nope"), ("--ip", "fe80::1%eth0"), ()])
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
    answer = hunt(settings, "--sid", sid, "--days", "60")
    assert {m["mac"] for m in answer["matches"]} == routers
    assert all(m["records_expired"] for m in answer["matches"])
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
    address = next(r["src_ip"] for r in held[mac(0)] if r.get("src_ip"))
    answer = await client.post("/console/hunt", data={"csrf": token, "indicators":
                                                      f"ip {address}", "days": "30"})
    text = await answer.text()
    assert answer.status == 200 and f"/console/routers/{mac(0)}" in text
    assert "Hunts made" not in text  # the record is for operators
    assert sql.rows("SELECT asked_by, via FROM hunt_log") == [(f"console:{SUPPORT[0]}",
                                                                "console")]
    records = await client.get(f"/console/routers/{mac(0)}/records?match=ip:{address}")
    assert records.status == 200 and address in await records.text()
    refused = await client.post("/console/hunt", data={"csrf": token, "indicators": "nonsense",
                                                       "days": "30"})
    assert refused.status == 400 and "give its kind" in await refused.text()
    await client.post("/console/sign-out", data={"csrf": token})
    assert (await sign_in(client, OPERATOR)).status == 303
    assert "Hunts made" in await (await client.get("/console/hunt")).text()
