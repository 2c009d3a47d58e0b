"""The fleet defends each router (issue 46): an address reported by routers of enough networks
reaches every router's GET /rules/fleet after the fleet job, with evidence; poisoning is
resisted (one network counts once, young or unkeyed routers do not count, the rails hold);
outbreaks are kept in IDS payloads. Real ET alerts (the corpus's scans) over HTTP, a real
PostgreSQL, the real job."""

from __future__ import annotations

import gzip
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from engine.firewall import Exemptions
from engine.fleet import fleet_attackers, fleet_document
from engine.generate import PayloadLimits, TelemetrySummary, generate
from engine.ruleset import Ruleset
from server.db.connect import connect_async
from server.tuning import allowlist_sql as allowlist_db
from server.generation.sql import renew_and_summarise
from server.fleet.config import FleetConfig
from server.fleet.job import run_fleet
from server.jobs.preprocess import run_preprocess
from server.typedefs import DATABASE, FLEET_LIST
from testkit.database import command_env, settings_for
from testkit.fleet import attack_body, sids
from testkit.rule_archives import ruleset_settings
from testkit.waiting import wait_for
from tests.commands import router_backend, router_backend_output
from tests.test_console import SUPPORT, console_settings, sign_in

ATTACKER = "45.33.32.156"


def mac(n: int) -> str:
    return f"aa:bb:cc:46:{n // 256:02x}:{n % 256:02x}"


def network_address(n: int) -> str:
    """A poll address in a /24 of its own for each n."""
    return f"81.{n // 200 + 2}.{n % 200}.7"


async def poll(client, router: str, address: str) -> dict:
    response = await client.get("/rules/last_updated", headers={
        "X-ID": router, "X-Forwarded-For": address})
    assert response.status == 200
    return await response.json()


async def report(client, router: str, address: str, attacker: str = ATTACKER) -> None:
    """A router polls (its poll address is recorded) and uploads the scan alerts."""
    await poll(client, router, address)
    response = await client.post("/log/events", data=attack_body(attacker), headers={
        "X-ID": router, "X-Forwarded-For": address, "Content-Type": "application/x-ndjson"})
    assert response.status == 200 and (await response.json())["rejected"] == 0


async def fleet_list(client, router: str, **headers: str) -> tuple[int, dict | None, str]:
    response = await client.get("/rules/fleet", headers={"X-ID": router, **headers})
    body = await response.read()
    return response.status, orjson.loads(body) if body else None, response.headers.get("ETag")


def listed(document: dict) -> dict[str, dict]:
    return {entry["address"]: entry for entry in document["entries"]}


@pytest.fixture
def fleet_settings(database, tmp_path):
    return settings_for(database, tmp_path, FLEET_MIN_ROUTER_AGE_HOURS="0",
                        FLEET_ATTACKERS_IN_MAC_MODE="true")


async def run_job(client, settings) -> dict:
    """The job, once its notification reached the app (a poll before is answered from the
    list before: the job notifies at every run, changed or not)."""
    lists = client.app[FLEET_LIST]
    heard = lists.heard
    detail = await run_fleet(client.app[DATABASE], FleetConfig.from_settings(settings))

    async def notified() -> bool:
        return lists.heard > heard
    await wait_for(notified, timeout=30, interval=0.02)
    return detail


async def test_an_attacker_of_enough_networks_reaches_every_router_with_evidence(
        make_client, fleet_settings, sql):
    client = await make_client(fleet_settings)
    for n in range(5):
        await report(client, mac(n), network_address(n))
    bystander = mac(99)
    await poll(client, bystander, network_address(99))
    status, before, etag_before = await fleet_list(client, bystander)
    assert status == 200 and before == {"entry_count": 0, "entries": []}
    detail = await run_job(client, fleet_settings)
    assert detail["attackers"] == 1
    status, document, etag = await fleet_list(client, bystander)
    entry = listed(document)[ATTACKER]
    assert entry == {"address": ATTACKER, "family": 4, "reasons": ["fleet"],
                     "expires_at": entry["expires_at"]}  # nothing that moves while it attacks
    stored = sql.rows("SELECT routers, networks, signatures, last_seen FROM fleet_attackers "
                     "WHERE address = %s", (ATTACKER,))[0]
    assert stored[:2] == (5, 5) and set(stored[2]) <= sids() and stored[2]
    assert entry["expires_at"] > stored[3].strftime("%Y-%m-%dT%H:%M:%SZ")
    assert etag != etag_before
    # The document names no router: no MAC, no reporter's address.
    text = orjson.dumps(document).decode()
    assert "aa:bb:cc" not in text and "81." not in text
    # Its ETag answers 304 (from memory), and /rules/last_updated names it.
    assert (await fleet_list(client, bystander, **{"If-None-Match": etag}))[0] == 304
    assert (await poll(client, bystander, network_address(99)))["fleet_etag"] == etag
    # The operators' evidence names the reporters and their networks.
    reporters = sql.value("SELECT reporters FROM fleet_attackers WHERE address = %s",
                          (ATTACKER,))
    assert sorted(r[0] for r in reporters) == [mac(n) for n in range(5)]
    assert {r[1] for r in reporters} == {f"{network_address(n).rsplit('.', 1)[0]}.0/24"
                                         for n in range(5)}


async def test_routers_behind_one_network_count_once(make_client, fleet_settings, sql):
    client = await make_client(fleet_settings)
    for n in range(20):  # one /24, twenty routers
        await report(client, mac(n), f"81.9.9.{n + 1}")
    for n in range(20, 23):  # three more networks: four in all
        await report(client, mac(n), network_address(n))
    detail = await run_job(client, fleet_settings)
    assert detail["attackers"] == 0
    await report(client, mac(30), network_address(30))  # a fifth network
    assert (await run_job(client, fleet_settings))["attackers"] == 1
    assert ATTACKER in listed((await fleet_list(client, mac(0)))[1])
    assert sql.rows("SELECT routers, networks FROM fleet_attackers WHERE address = %s",
                    (ATTACKER,)) == [(24, 5)]


async def test_young_routers_do_not_count(make_client, database, tmp_path, sql):
    settings = settings_for(database, tmp_path, FLEET_MIN_ROUTER_AGE_HOURS="72",
                            FLEET_ATTACKERS_IN_MAC_MODE="true")
    client = await make_client(settings)
    for n in range(5):
        await report(client, mac(n), network_address(n))
    assert (await run_job(client, settings))["attackers"] == 0
    sql.rows("UPDATE routers SET registered_at = now() - interval '73 hours' "
             "WHERE mac <> %s", (mac(4),))
    assert (await run_job(client, settings))["attackers"] == 0  # four old enough
    sql.rows("UPDATE routers SET registered_at = now() - interval '73 hours'")
    assert (await run_job(client, settings))["attackers"] == 1


async def test_in_key_mode_only_keyed_routers_count(make_client, fleet_settings, sql):
    client = await make_client(fleet_settings)
    for n in range(5):
        await report(client, mac(n), network_address(n))
    keyed = fleet_settings.replace(router_auth="key")
    for n in range(4):
        sql.rows("INSERT INTO router_keys (mac, key_hash, issued_by) "
                 "VALUES (%s, '\\x00', 'operator')", (mac(n),))
    assert (await run_job(client, keyed))["attackers"] == 0
    sql.rows("INSERT INTO router_keys (mac, key_hash, issued_by) VALUES (%s, '\\x00', 'operator')",
             (mac(4),))
    assert (await run_job(client, keyed))["attackers"] == 1


@pytest.mark.parametrize("attacker", ["10.1.2.3", "203.0.113.5", "::ffff:10.0.0.1",
                                      "81.2.0.7", "198.18.0.1"])
async def test_rails_keep_private_reserved_and_poll_addresses_off_the_list(
        make_client, fleet_settings, attacker):
    """81.2.0.7 is where router 0 polls from (network_address(0))."""
    client = await make_client(fleet_settings)
    for n in range(6):
        await report(client, mac(n), network_address(n), attacker=attacker)
    assert (await run_job(client, fleet_settings))["attackers"] == 0
    assert (await fleet_list(client, mac(0)))[1]["entries"] == []


async def test_the_service_own_addresses_are_never_listed(make_client, database, tmp_path):
    settings = settings_for(database, tmp_path, FLEET_MIN_ROUTER_AGE_HOURS="0",
                            SERVICE_ADDRESSES="45.33.32.0/24", FLEET_ATTACKERS_IN_MAC_MODE="true")
    client = await make_client(settings)
    for n in range(5):
        await report(client, mac(n), network_address(n))
    detail = await run_job(client, settings)
    assert detail["attackers"] == 0 and detail["not_listed"] == 0


async def test_the_allowlist_vetoes_an_address_at_once_and_a_router_own_entry_for_it_alone(
        make_client, fleet_settings):
    client = await make_client(fleet_settings)
    for n in range(5):
        await report(client, mac(n), network_address(n))
    await run_job(client, fleet_settings)
    own, _ = await allowlist_db.add(client.app[DATABASE], "45.33.32.0/24", mac(1), None,
                                    "test")
    await until_listed(client, mac(1), lambda listing: ATTACKER not in listing)  # its own
    status, shared, etag = await fleet_list(client, mac(2))
    assert ATTACKER in listed(shared)
    assert (await fleet_list(client, mac(1), **{"If-None-Match": etag}))[0] == 200
    await allowlist_db.remove(client.app[DATABASE], own, "test")
    await allowlist_db.add(client.app[DATABASE], ATTACKER, None, "ours", "test")
    # The veto holds before the job runs again, and after.
    await until_listed(client, mac(2), lambda listing: not listing)
    assert (await run_job(client, fleet_settings))["attackers"] == 0


async def until_listed(client, router: str, holds) -> None:
    """Wait until the router's list, as served, holds (the allowlist's notification
    reaches the app's listening connection in its own time)."""
    async def served() -> bool:
        return holds(listed((await fleet_list(client, router))[1]))
    await wait_for(served, timeout=10, interval=0.05)


async def test_fleet_list_needs_what_other_router_endpoints_need(make_client, database,
                                                                 tmp_path):
    closed = settings_for(database, tmp_path, REGISTRATION_MODE="closed")
    client = await make_client(closed)
    assert (await fleet_list(client, mac(1)))[0] == 403
    assert (await client.get("/rules/fleet")).status == 401
    keyed = settings_for(database, tmp_path, ROUTER_AUTH="key", ENROLLMENT_TOKEN="t" * 32)
    client = await make_client(keyed)
    assert (await fleet_list(client, mac(1)))[0] == 401


async def test_the_fleet_job_finds_outbreaks_and_generation_reads_them(
        make_client, fleet_settings, database):
    client = await make_client(fleet_settings)
    for n in range(5):
        await report(client, mac(n), network_address(n))
    detail = await run_job(client, fleet_settings)
    assert detail["outbreaks"] == len(sids())
    async with await connect_async(database, 5) as conn, conn.cursor() as cur:
        await cur.execute("INSERT INTO generation_queue (mac, claimed_by, claimed_until) "
                          "VALUES (%s, 'me', now() + interval '1 minute') ON CONFLICT (mac) "
                          "DO UPDATE SET claimed_by = 'me', claimed_until = now() + interval "
                          "'1 minute'", (mac(99),))
        summary = await renew_and_summarise(cur, "me", mac(99), timedelta(minutes=1),
                                            timedelta(days=7), 2)
    assert {row[0] for row in summary.outbreaks} == sids()
    assert all(row[1] == 5 for row in summary.outbreaks)


async def test_commands_and_console_show_the_lists_with_their_evidence(make_client,
                                                                        fleet_settings):
    client = await make_client(console_settings(fleet_settings))
    for n in range(5):
        await report(client, mac(n), network_address(n))
    env = command_env(fleet_settings, FLEET_MIN_ROUTER_AGE_HOURS="0",
                      FLEET_ATTACKERS_IN_MAC_MODE="true")

    def command(*args: str) -> str:
        return router_backend_output(env, "fleet", *args)
    before = router_backend(env, "fleet", "attackers")
    assert len(before.stdout.splitlines()) == 1  # the header: the rows are tab-separated only
    assert before.stderr.startswith("1 address(es) reported in the last 24 h: 0 listed; kept "
                                    "out: 1 enough networks")
    assert "attackers=1" in command("run")
    after = router_backend(env, "fleet", "attackers")
    line = after.stdout.splitlines()[1].split("\t")
    assert line[:3] == [ATTACKER, "5", "5"] and mac(0) in line[-1]
    assert after.stderr.startswith("1 address(es) reported in the last 24 h: 1 listed")
    why = command("attackers", "--why", ATTACKER).splitlines()
    assert why[0].startswith(f"{ATTACKER}: listed; 5 network(s) counted of 5 needed")
    assert sum("counts" in line for line in why[1:]) == 5
    assert {entry["sid"] for entry in orjson.loads(command("outbreaks", "--json"))} == sids()
    assert (await sign_in(client, SUPPORT)).status == 303
    page = await (await client.get(f"/console/routers/{mac(99 - 98)}")).text()
    assert "From the fleet's list (1)" in page and ATTACKER in page
    fleet_page = await (await client.get("/console/")).text()
    assert "The fleet's attackers (1)" in fleet_page and f"Outbreaks ({len(sids())})" in fleet_page


# The engine alone: the rails, order and cap, and generation with outbreaks.

def found(address: str, networks: int, routers: int | None = None) -> dict:
    return {"address": address, "routers": routers or networks, "networks": networks,
            "alerts": 10, "severity": 2, "signatures": [2010935], "first_seen":
            "2026-11-26T01:00:00Z", "last_seen": "2026-11-26T02:00:00Z", "reporters": []}


def test_attackers_are_ordered_capped_and_expire_a_window_after_their_last_hour():
    entries = fleet_attackers([found("1.1.1.9", 5), found("8.8.8.9", 9), found("9.9.9.9", 5, 7),
                               found("192.168.0.1", 50)], Exemptions(), 2, 24)
    assert [e["address"] for e in entries] == ["8.8.8.9", "9.9.9.9"]
    # 02:00 + 1 h + 24 h = 03:00, rounded up to the next 6-hour boundary
    assert entries[0]["expires_at"] == "2026-11-27T06:00:00Z"


def test_the_document_is_the_same_bytes_for_the_same_inputs_and_drops_exemptions():
    entries = fleet_attackers([found("1.1.1.9", 5), found("2001:4860::9", 6)], Exemptions(),
                              10, 24)
    first = orjson.dumps(fleet_document(entries), option=orjson.OPT_SORT_KEYS)
    assert first == orjson.dumps(fleet_document(list(entries)), option=orjson.OPT_SORT_KEYS)
    mine = fleet_document(entries, Exemptions.of(["1.1.0.0/16"], []))
    assert [e["address"] for e in mine["entries"]] == ["2001:4860::9"]
    assert mine["entries"][0]["family"] == 6


def _ruleset(count: int) -> Ruleset:
    rules = [{"gid": 1, "sid": 1000 + n, "rev": 1, "action": "alert", "msg": f"rule {n}",
              "classtype": "misc-attack", "weight": 1.0, "raw": f"alert ip any any -> any any "
              f"(msg:\"rule {n}\"; sid:{1000 + n}; rev:1;)", "flowbits": {}, "file":
              "x.rules", "app_proto": None, "dst_port": "any", "noalert": False,
              "eligible": True} for n in range(count)]
    return Ruleset("v1", Path("."), rules, {rule["sid"]: rule for rule in rules})


def test_outbreaks_are_kept_within_their_share_and_change_nothing_when_absent():
    ruleset = _ruleset(200)
    limits = PayloadLimits(sample_count=20, firewall_max_entries=10, fleet_share=0.1)
    plain = generate(ruleset, TelemetrySummary(), [], limits, 7)
    also = generate(ruleset, TelemetrySummary(outbreaks=[]), [], limits, 7)
    assert plain.ids == also.ids and plain.firewall == also.firewall
    for n in (53, 55):  # the ruleset weighs these two higher than the rest
        ruleset.by_sid[1000 + n]["weight"] = 2.0
    outbreaks = [(1000 + n, 10 - n % 5, 1 + n % 3) for n in range(50, 60)]
    kept = generate(ruleset, TelemetrySummary(outbreaks=outbreaks), [], limits, 7)
    fleet = [rule for rule in kept.ids["rules"] if rule["reason"] == "fleet"]
    assert len(fleet) == 2 and kept.stats["from_fleet"] == 2 and kept.ids["rule_count"] == 20
    # the ruleset's weight first, then the most widely seen; the severity the reporters
    # claimed (1 for n = 51, 54, 57) counts for nothing (issue 50)
    assert {rule["sid"]: rule["fleet_networks"] for rule in fleet} == {1053: 7, 1055: 10}
    again = generate(ruleset, TelemetrySummary(outbreaks=list(reversed(outbreaks))), [],
                     limits, 7)
    assert gzip.compress(orjson.dumps(again.ids), mtime=0) == gzip.compress(
        orjson.dumps(kept.ids), mtime=0)


async def test_rulegen_explains_what_a_router_gets_from_the_fleet(database, tmp_path,
                                                                  make_client, sql):
    settings = ruleset_settings("fixture", database, tmp_path).replace(
        rule_generation_sample_count=8, fleet_min_router_age_hours=0,
        fleet_attackers_in_mac_mode=True)
    await run_preprocess(settings)
    client = await make_client(settings)
    for n in range(5):
        await report(client, mac(n), network_address(n))
    await run_job(client, settings)
    sql.rows("INSERT INTO fleet_outbreaks VALUES (9000001, 1, 9, 7, 40, now(), now(), '[]')")
    await poll(client, mac(99), network_address(99))
    result = subprocess.run([sys.executable, "-m", "ops.rulegen", "--mac", mac(99),
                             "--explain"], env=command_env(
                                settings, RULE_GENERATION_SAMPLE_COUNT="8",
                                RULE_GENERATION_FLEET_PERCENT="50",
                                FLEET_ATTACKERS_IN_MAC_MODE="true"),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "1 from the fleet's outbreaks" in lines[0]
    assert any(line.startswith("  1:9000001 ") and line.endswith(
        "firing across the fleet: at routers of 7 networks") for line in lines), lines
    fleet = lines[lines.index(next(line for line in lines if line.startswith("Fleet entries"))):]
    assert fleet[0].startswith("Fleet entries (1,")
    assert fleet[1].startswith(f"  {ATTACKER}: reported by 5 routers of 5 networks")
    assert mac(0) in fleet[1] and "blocked until 20" in fleet[1]


async def test_in_mac_mode_the_attackers_list_is_off_unless_chosen(make_client, database,
                                                                   tmp_path):
    """Issue 50: in mac mode anyone uploads as any router, so no attackers list by default
    (outbreaks are still counted)."""
    settings = settings_for(database, tmp_path, FLEET_MIN_ROUTER_AGE_HOURS="0")
    client = await make_client(settings)
    for n in range(5):
        await report(client, mac(n), network_address(n))
    detail = await run_job(client, settings)
    assert detail["attackers"] == 0 and not detail["attackers_counted"]
    assert detail["outbreaks"] == len(sids())
    chosen = settings.replace(fleet_attackers_in_mac_mode=True)
    assert (await run_job(client, chosen))["attackers"] == 1


async def test_age_counts_from_the_current_key(make_client, fleet_settings, sql):
    """Issue 50: a router registered long ago whose key was issued today (a reset and a new
    enrollment) does not count yet, in key mode and in mac mode alike."""
    client = await make_client(fleet_settings)
    for n in range(5):
        await report(client, mac(n), network_address(n))
    sql.rows("UPDATE routers SET registered_at = now() - interval '10 days'")
    for n in range(5):
        sql.rows("INSERT INTO router_keys (mac, key_hash, issued_by, issued_at) "
                 "VALUES (%s, '\\x00', 'enrollment', now() - interval '10 days')", (mac(n),))
    aged = fleet_settings.replace(fleet_min_router_age_hours=72)
    for mode in ("key", "mac"):
        assert (await run_job(client, aged.replace(router_auth=mode)))["attackers"] == 1
    sql.rows("UPDATE router_keys SET issued_at = now() WHERE mac = %s", (mac(0),))
    for mode in ("key", "mac"):
        assert (await run_job(client, aged.replace(router_auth=mode)))["attackers"] == 0


async def test_uploads_count_for_the_network_they_came_from(make_client, fleet_settings):
    """Issue 50: five routers that polled from five /24s and upload from one address are one
    network; a poll address says nothing of where the alerts came from."""
    client = await make_client(fleet_settings)
    for n in range(5):
        await poll(client, mac(n), network_address(n))
        response = await client.post("/log/events", data=attack_body(ATTACKER), headers={
            "X-ID": mac(n), "X-Forwarded-For": "83.99.1.7",
            "Content-Type": "application/x-ndjson"})
        assert response.status == 200
    assert (await run_job(client, fleet_settings))["attackers"] == 0


@pytest.mark.parametrize("spelling", ["::ffff:81.2.0.7", "::81.2.0.7", "64:ff9b::5102:7",
                                      "2002:5102:7::1"])
async def test_a_poll_address_is_protected_in_every_spelling(make_client, fleet_settings,
                                                             spelling):
    """81.2.0.7 is where router 0 polls from; the others report it in another form."""
    client = await make_client(fleet_settings)
    await poll(client, mac(0), network_address(0))
    for n in range(1, 7):
        await report(client, mac(n), network_address(n), attacker=spelling)
    assert (await run_job(client, fleet_settings))["attackers"] == 0


def test_the_special_purpose_table_holds_every_spelling():
    """One module decides what is public (engine/addresses.py), not the running Python."""
    from engine.addresses import is_public
    for address in ("64:ff9b:1::808:808", "3fff::1", "5f00::1", "fec0::1", "100:0:0:1::1",
                    "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2002:a00:1::1", "::ffff:10.0.0.1",
                    "64:ff9b::a00:1", "::10.0.0.1", "192.88.99.1", "2620:4f:8000::1",
                    "fe80::1", "ff02::1", "240.0.0.1", "192.0.0.9"):
        assert not is_public(address), address
    for address in ("8.8.8.8", "2606:4700::1", "2002:808:808::1", "64:ff9b::808:808",
                    "2001:470:1::1"):
        assert is_public(address), address


@pytest.mark.parametrize("reported", ["2002:5db8:d822:1::5", "2002:5db8:d822:1::99",
                                      "93.184.216.34", "2002:5db8:d822::1"])
async def test_a_6to4_poll_address_protects_its_site_and_its_ipv4(make_client, fleet_settings,
                                                                 reported):
    """Found by the hostile-member review of issue 50: a router polling from a 6to4 address
    could have it (or the IPv4 address it carries) listed."""
    client = await make_client(fleet_settings)
    await poll(client, mac(0), "2002:5db8:d822:1::5")
    for n in range(1, 7):
        await report(client, mac(n), network_address(n), attacker=reported)
    assert (await run_job(client, fleet_settings))["attackers"] == 0


async def test_6to4_forms_of_an_allowlisted_network_cannot_push_attackers_out(
        make_client, database, tmp_path):
    """Found by the same review: such forms passed the query's rails, took the places
    before its limit and were dropped after it, so the real attacker went unlisted."""
    settings = settings_for(database, tmp_path, FLEET_MIN_ROUTER_AGE_HOURS="0",
                            FLEET_ATTACKERS_IN_MAC_MODE="true", FLEET_MAX_ENTRIES="3")
    client = await make_client(settings)
    assert (await client.app[DATABASE].fetchone(
        "INSERT INTO firewall_allowlist (network, note) "
        "VALUES ('93.184.216.0/24', 'partner') RETURNING 1")) is not None
    for n in range(5):
        await report(client, mac(n), network_address(n))
    for n in range(10, 16):
        for form in ("2002:5db8:d800::1", "2002:5db8:d801::2", "2002:5db8:d802::3"):
            await report(client, mac(n), network_address(n), attacker=form)
    detail = await run_job(client, settings)
    assert detail["attackers"] == 1 and detail["not_listed"] == 0


async def test_a_router_moving_its_poll_address_cannot_flip_the_list(make_client,
                                                                     fleet_settings):
    """Found by the same review: polling from the reported address before one run and from
    another before the next flipped the list (and every router's ETag) at every run."""
    client = await make_client(fleet_settings)
    target = "85.6.1.8"
    for n in range(5):
        await report(client, mac(n), network_address(n), attacker=target)
    mover = mac(50)
    etags = set()
    for address in (target, "85.6.1.7", target, "85.6.1.7"):
        await poll(client, mover, address)
        assert (await run_job(client, fleet_settings))["attackers"] == 0
        etags.add((await poll(client, mac(0), network_address(0)))["fleet_etag"])
    assert len(etags) == 1


async def test_an_empty_list_says_which_rule_kept_each_address_out(make_client, database,
                                                                   tmp_path):
    """Issue 54: `fleet attackers` said nothing when the list was empty."""
    settings = settings_for(database, tmp_path, FLEET_MIN_ROUTER_AGE_HOURS="0",
                            FLEET_ATTACKERS_IN_MAC_MODE="true")
    client = await make_client(settings)
    for n in range(3):
        await report(client, mac(n), network_address(n))
    for n in range(3, 6):
        await report(client, mac(n), network_address(n), attacker="10.9.9.9")
    assert (await run_job(client, settings))["attackers"] == 0
    env = command_env(settings, FLEET_MIN_ROUTER_AGE_HOURS="0",
                      FLEET_ATTACKERS_IN_MAC_MODE="true")
    summary = router_backend(env, "fleet", "attackers").stderr.strip()
    assert summary == ("2 address(es) reported in the last 24 h: 0 listed; kept out: "
                       "1 not public; 1 below the networks threshold (FLEET_MIN_NETWORKS is 5)")
    why = router_backend_output(env, "fleet", "attackers", "--why", ATTACKER).splitlines()
    assert why[0] == (f"{ATTACKER}: below the networks threshold; 3 network(s) counted of 5 "
                      "needed, 3 report(s)")
    nothing = router_backend_output(env, "fleet", "attackers", "--why", "198.51.100.1")
    assert "not reported in the last 24 h" in nothing
