"""Rule overrides (issue 16) end to end: the `rules` commands, the queue regenerating the
routers concerned within one poll, the payloads honouring the overrides."""

from __future__ import annotations

import subprocess

import pytest

from server.jobs.preprocess import run_preprocess
from testkit.database import command_env
from testkit.payloads import unpack
from testkit.rule_archives import ruleset_settings
from testkit.waiting import generated_after
from tests.commands import router_backend, run_program

ONE, TWO = "aa:bb:cc:00:16:41", "aa:bb:cc:00:16:42"


def rules_command(settings, *args: str) -> subprocess.CompletedProcess:
    return router_backend(command_env(settings), "rules", *args)


def payload_sids(sql, mac: str) -> dict[int, dict]:
    packed = sql.value("SELECT ids_payload_gz FROM router_rules WHERE mac = %s", (mac,))
    return {rule["sid"]: rule for rule in unpack(bytes(packed))["rules"]} if packed else {}


@pytest.fixture
async def fleet(database, tmp_path, make_client, sql):
    settings = ruleset_settings("fixture", database, tmp_path).replace(
        rule_generation_enabled=True, rule_generation_interval_seconds=86400)
    await run_preprocess(settings)
    client = await make_client(settings)
    for mac in (ONE, TWO):
        assert (await client.get("/rules/last_updated", headers={"X-ID": mac})).status == 200
    await generated_after(sql, "-infinity", [ONE, TWO])
    return settings, client


async def test_overrides_reach_the_routers_within_one_poll(fleet, sql):
    settings, _ = fleet
    before = sql.value("SELECT now()")
    disabled = rules_command(settings, "disable", "classtype:attempted-recon",
                             "--note", "noisy on home networks")
    assert disabled.returncode == 0, disabled.stderr
    assert "2 routers made due for generation now" in disabled.stdout
    await generated_after(sql, before, [ONE, TWO], timeout=20)  # poll: 1 s
    before = sql.value("SELECT now()")
    enabled = rules_command(settings, "enable", "9000004", "--mac", TWO)
    assert enabled.returncode == 0 and "1 routers made due" in enabled.stdout
    await generated_after(sql, before, [TWO], timeout=20)
    one, two = payload_sids(sql, ONE), payload_sids(sql, TWO)
    assert 9000001 not in one and 9000001 not in two  # attempted-recon, fleet-wide off
    assert two[9000004]["reason"] == "override" and 9000004 not in one
    listed = rules_command(settings, "overrides").stdout.splitlines()
    assert listed[1].split("\t")[1:4] == ["disable", "classtype:attempted-recon", "fleet"]
    assert listed[2].split("\t")[1:4] == ["enable", "9000004", TWO]
    assert listed[1].endswith("noisy on home networks")

    before = sql.value("SELECT now()")
    removed = rules_command(settings, "remove", listed[2].split("\t")[0])
    assert removed.returncode == 0 and "1 routers made due" in removed.stdout
    await generated_after(sql, before, [TWO], timeout=20)
    assert 9000004 not in payload_sids(sql, TWO)


async def test_selectors_that_match_nothing_or_are_malformed_are_not_stored(fleet, sql):
    settings, _ = fleet
    # A malformed selector is a bad argument (exit 2, as argparse's); one that matches
    # nothing, an unknown router or override, a refusal (exit 1).
    for args, message, code in ((["disable", "12345"], "matches no rule of ruleset fixture", 1),
                                (["disable", "re:("], "not a regular expression", 2),
                                (["enable", "group:nope.rules"], "matches no rule", 1),
                                (["disable", "9000001", "--mac", "aa:bb:cc:00:16:99"],
                                 "is not registered", 1),
                                (["remove", "77"], "no override 77", 1)):
        result = rules_command(settings, *args)
        assert result.returncode == code and message in result.stderr, (args, result.stderr)
    assert sql.value("SELECT count(*) FROM rule_overrides") == 0


async def test_rulegen_explains_every_rule_and_entry(database, tmp_path, make_client, sql):
    settings = ruleset_settings("fixture", database, tmp_path).replace(
        rule_generation_sample_count=8)
    await run_preprocess(settings)
    client = await make_client(settings)
    alerts = b"\n".join(
        b'{"event_type": "alert", "flow_id": %d, "src_ip": "45.33.32.156", '
        b'"dest_ip": "192.168.1.2", "alert": {"signature_id": %d, "severity": 1}}' % (n, sid)
        for n, sid in enumerate([9000003, 9000003, 9000001]))
    response = await client.post("/log/events", data=alerts, headers={
        "X-ID": ONE, "Content-Type": "application/x-ndjson"})
    assert response.status == 200
    env = command_env(settings, RULE_GENERATION_SAMPLE_COUNT="8")
    override = router_backend(env, "rules", "enable", "9000004", "--mac", ONE)
    assert override.returncode == 0, override.stderr
    result = run_program("ops.rulegen", env, "--mac", ONE, "--explain")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "1 from overrides, 2 from its own alerts" in lines[0]
    rules = {line.split()[0]: line for line in lines if line.startswith("  1:")}
    assert rules["1:9000004"].endswith("forced by override 1")
    assert rules["1:9000003"].endswith("fired 2 times in the last 7 days")
    assert rules["1:9000002"].endswith("flowbit setter for 9000003")
    sampled = [line for line in rules.values() if "sampled with weight" in line]
    assert sampled and all(" = severity " in line and "× recency" in line for line in sampled)
    entries = {line.split(":")[0].strip(): line for line in lines
               if line.startswith("  ") and not line.startswith("  1:")}
    assert "3 of its alerts, the last at 20" in entries["45.33.32.156"]
    assert "sid 9000003 ×2 (severity 1, 2 flows)" in entries["45.33.32.156"]
    assert "blocked until 20" in entries["45.33.32.156"]
    assert entries["185.220.101.1"].endswith("on the compromised-IPs list; as long as the list "
                                             "names it")
