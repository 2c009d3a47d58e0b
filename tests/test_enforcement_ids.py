"""The IDS rules' alerts by their source in the enforcement report (issue 82): the agent
counts each alert by the reason its rule is in the payload it applied, the service stores a
list per source (`ids.fired`, ...) and counts it for the fleet beside the block lists; an
owner's weekly "blocked" figure leaves them out; a report of another shape is refused
whole."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from server.enforcement.config import EnforcementConfig
from server.enforcement.figures import effectiveness
from server.reports.sql import week_rows
from server.typedefs import DATABASE, SETTINGS
from server.db.lifecycle import open_database
from testkit.payloads import store_payload_objects
from tests.test_agent import MAC, append, config_for, run_round, url_of
from tests.test_enforcement import _poll, _report

RULES = [(9000000, "fired"), (9000001, "sampled"), (9000002, "flowbits")]


def _ids_payload() -> dict:
    return {"version": "20200616", "rule_count": len(RULES), "rules": [
        {"gid": 1, "sid": sid, "reason": reason,
         "raw": f'alert ip any any -> any any (msg:"{reason}"; sid:{sid};)'}
        for sid, reason in RULES]}


def _alert(sid: int) -> bytes:
    return json.dumps({
        "timestamp": "2026-12-08T10:00:00.000000+0000", "event_type": "alert",
        "src_ip": "45.33.32.156", "src_port": 4444, "dest_ip": "192.168.1.10",
        "dest_port": 22, "proto": "TCP", "alert": {
            "action": "allowed", "gid": 1, "signature_id": sid, "rev": 1,
            "signature": "test", "category": "test", "severity": 2}}).encode()


async def test_the_agent_reports_its_rules_alerts_by_source(client, settings, sql, tmp_path):
    config = config_for(tmp_path, url_of(client), test_command=("true",),
                        reload_command=("true",), firewall_test_command=("true",),
                        firewall_reload_command=("true",), counters_command=(),
                        enforcement_seconds=1e-6)  # (no set read: the firewall is not here)
    assert (await run_round(config))[0] == 0  # registered
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, {"ids": _ids_payload()})
    assert (await run_round(config))[0] == 0  # applied, its sources known: a report of 0s
    # 3 alerts of the fired rule, 1 of the sampled one, 2 of the intel rules, 1 of a rule
    # the payload does not have (not counted)
    append(config.eve_json, [_alert(sid) for sid in (9000000, 9000001, 9000000, 1990001,
                                                      9000000, 1990002, 2999999)])
    assert (await run_round(config))[0] == 0
    days = dict(sql.rows("SELECT list, alerts FROM enforcement_days"))
    assert days == {"ids.fired": 3, "ids.sampled": 1, "ids.flowbits": 0, "intel": 2}
    assert (await run_round(config))[0] == 0  # the next report: each source again, 0 new
    assert dict(sql.rows("SELECT list, alerts FROM enforcement_days")) == days
    assert sql.value("SELECT reports FROM enforcement_days WHERE list = 'ids.flowbits'") == 3


async def test_sources_are_counted_for_the_fleet_and_left_out_of_the_blocked_figure(
        client, sql):
    macs = [f"02:88:00:00:00:{n:02x}" for n in range(3)]
    for n, mac in enumerate(macs):
        await _poll(client, mac, f"47.{n}.0.1")
    sql.rows("UPDATE routers SET registered_at = now() - interval '4 days'")
    for n, mac in enumerate(macs):  # two networks alert on their fired rules, one does not
        status, stored = await _report(client, mac, {"lists": {"ids": {
            "fired": 5 if n < 2 else 0, "sampled": 1}}}, f"47.{n}.0.1")
        assert status == 200, stored
        assert stored["lists"]["ids.fired"] == {"entries": 0, "ignored": 0, "over_budget": 0}
    counted = await effectiveness(client.app[DATABASE], EnforcementConfig.from_settings(
        client.app[SETTINGS]), 1)
    lists = {figures.list: figures for figures in counted.lists}
    fired, sampled = lists["ids.fired"], lists["ids.sampled"]
    assert (fired.routers, fired.networks, fired.matched_routers, fired.matched_networks,
            fired.alerts, fired.packets) == (3, 3, 2, 2, 10, 0)
    assert (sampled.matched_networks, sampled.alerts) == (3, 3)
    await _report(client, macs[0], {"lists": {"fleet": {"packets": 4, "bytes": 400}}},
                  "47.0.0.1")
    midnight = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    week = await week_rows(client.app[DATABASE], macs, midnight - timedelta(days=1),
                           midnight + timedelta(days=1))
    assert week["blocked"] == [(macs[0], "fleet", 4, 400)]  # an owner's week: block lists


@pytest.mark.parametrize("ids", [
    [], {"mine": 1}, {"fired": -1}, {"fired": 2 ** 63}, {"fired": "1"}, {"fired": 1.5},
    {"fired": {"alerts": 1}}])
async def test_a_report_of_sources_of_another_shape_is_refused_whole(client, sql, ids):
    await _poll(client, MAC)
    status, answer = await _report(client, MAC, {"lists": {
        "ids": ids, "firewall": {"packets": 0, "bytes": 0}}})
    assert status == 400 and "lists.ids" in answer["error"], answer
    assert sql.value("SELECT count(*) FROM enforcement_days") == 0
