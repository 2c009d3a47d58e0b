"""The pure generation function on a published ruleset (the fixture, and the corpus when present)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.generate import Holds, PayloadLimits, TelemetrySummary, generate, seed_for
from engine.ruleset import load_ruleset
from engine.selectors import Selector, matching
from ruledata.parser import FLOWBIT_CHECKS, FLOWBIT_SETS
from server.jobs.preprocess import run_preprocess
from server.settings import load_settings
from testkit.corpus import corpus_path
from testkit.rule_archives import fixture_members, make_zip

MAC = "aa:bb:cc:00:00:33"


def publish(tmp_path: Path, archive: Path) -> Path:
    (tmp_path / "version.txt").write_text("test-1")
    settings = load_settings({"DATA_DIR": str(tmp_path), "RULE_DATA_DIR": str(tmp_path / "rd"),
                              "RULE_PREPROCESS_ARCHIVE_URL": archive.as_uri(),
                              "RULE_PREPROCESS_VERSION_URL": (tmp_path / "version.txt").as_uri()},
                             env_file=None)
    asyncio.run(run_preprocess(settings))
    return (tmp_path / "rd" / "current").resolve()


@pytest.fixture(scope="module")
def fixture_ruleset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fixture-ruleset")
    archive = tmp / "archive.zip"
    archive.write_bytes(make_zip(fixture_members()))
    return load_ruleset(publish(tmp, archive))


@pytest.fixture(scope="module")
def corpus_ruleset(tmp_path_factory):
    archive = corpus_path("et-open-2020", "emerging.rules.zip")
    return load_ruleset(publish(tmp_path_factory.mktemp("corpus-ruleset"), archive))


def checked_bits_are_set(rules: list[dict], ruleset) -> None:
    by_raw = {r["raw"]: r for r in ruleset.rules}
    by_raw.update({s["raw"]: s for setters in ruleset.setters.values() for s in setters})
    chosen = [by_raw[r["raw"]] for r in rules]
    set_bits = {bit for r in chosen for c in FLOWBIT_SETS for bit in r["flowbits"].get(c, ())}
    for rule in chosen:
        for command in FLOWBIT_CHECKS:
            for bit in rule["flowbits"].get(command, ()):
                assert bit in set_bits, (rule["sid"], bit)


EXPIRES = "2026-03-09T10:00:00Z"


def test_fixture_generation(fixture_ruleset):
    # Real global addresses (scanme.nmap.org): documentation ranges are not global, and an
    # alert only blocks its external endpoint.
    summary = TelemetrySummary(fired=[(9000003, 4, 1), (424242, 1, 1)],
                               alerts=[("45.33.32.156", "192.168.1.2", 9000003, 1, 4, 3, EXPIRES),
                                       ("fd00::2", "2600:3c01::f03c:91ff:fe18:bb2f", 9000001,
                                        2, 2, 1, EXPIRES),
                                       ("fd00::2", "2600:3c01::f03c:91ff:fe18:bb2f", 9000003,
                                        1, 1, 1, "2026-03-09T11:00:00Z"),
                                       ("192.168.1.2", "10.0.0.1", 9000003, 1, 9, 9, EXPIRES)])
    compromised = fixture_ruleset.compromised_ips + ["45.33.32.156"]
    result = generate(fixture_ruleset, summary, compromised,
                      PayloadLimits(sample_count=5, firewall_max_entries=100,
                                    fired_share=1.0), seed_for(MAC, "v"))
    sids = {r["sid"]: r["reason"] for r in result.ids["rules"]}
    # Fired and eligible: kept; it checks TEST.beacon, so its setter 9000002 comes along.
    assert sids[9000003] == "fired" and sids[9000002] == "flowbits"
    assert result.ids["rule_count"] == len(result.ids["rules"]) <= 5
    assert 9000099 not in sids and 9000004 not in sids  # deleted, disabled: never sampled
    checked_bits_are_set(result.ids["rules"], fixture_ruleset)
    entries = {e["address"]: e for e in result.firewall["entries"]}
    assert entries["45.33.32.156"]["reasons"] == ["alert", "compromised-ips"]
    assert entries["45.33.32.156"]["alerts"] == [{"sid": 9000003, "severity": 1, "count": 4,
                                                  "flows": 3}]
    assert entries["45.33.32.156"]["expires_at"] is None  # held by the compromised list
    outbound = entries["2600:3c01::f03c:91ff:fe18:bb2f"]  # the outbound one's destination
    assert outbound["family"] == 6 and outbound["reasons"] == ["alert"]
    assert outbound["expires_at"] == "2026-03-09T11:00:00Z"  # the latest of its alerts
    assert [a["sid"] for a in outbound["alerts"]] == [9000003, 9000001]  # most severe first
    assert "fd00::2" not in entries and "10.0.0.1" not in entries  # local ends never
    assert entries["2a0b:f4c0:4d:53::1"]["reasons"] == ["compromised-ips"]
    assert entries["2a0b:f4c0:4d:53::1"]["expires_at"] is None
    assert "198.51.100.23" not in entries  # on the list, but a documentation address
    assert list(entries)[0] == "45.33.32.156"  # the router's own alerts come first
    assert result.stats["from_alerts"] == 1 and result.stats["firewall_from_alerts"] == 2


GLOBAL = "45.33.32.156"


def alert(sid: int, count: int, flows: int, src: str = GLOBAL) -> tuple:
    return (src, "192.168.1.2", sid, 1, count, flows, EXPIRES)


def blocked(fixture_ruleset, alerts, compromised=(), **summary) -> dict:
    result = generate(fixture_ruleset, TelemetrySummary(alerts=alerts, **summary),
                      list(compromised), PayloadLimits(sample_count=3,
                                                       firewall_max_entries=100), 1)
    return {e["address"]: e for e in result.firewall["entries"]}


@pytest.mark.parametrize("alerts,expected", [
    ([alert(9000003, 1, 1)], False),                       # one spoofed packet
    ([alert(9000003, 2, 2)], False),                       # fewer than 3 alerts
    ([alert(9000003, 5, 1)], False),                       # one signature, one flow
    ([alert(9000003, 2, 1), alert(9000001, 1, 1)], True),  # two signatures
    ([alert(9000003, 3, 2)], True),                        # two flows
])
def test_alert_blocks_need_several_alerts_from_signatures_or_flows(fixture_ruleset, alerts,
                                                                   expected):
    entries = blocked(fixture_ruleset, alerts)
    assert (GLOBAL in entries) is expected
    if expected:
        assert entries[GLOBAL]["expires_at"] == EXPIRES


def test_allowlist_and_own_address_are_never_blocked(fixture_ruleset):
    many = [alert(9000003, 9, 9), alert(9000001, 9, 9)]
    other = "104.16.0.1"
    both = many + [alert(9000003, 9, 9, other), alert(9000001, 9, 9, other)]
    assert {GLOBAL, other} <= set(blocked(fixture_ruleset, both, [other]))
    # Fleet or router allowlist (networks), whatever the reason: alerts or the list.
    entries = blocked(fixture_ruleset, both, [other, "104.16.0.9"],
                      allowlist=["45.33.0.0/16", "104.16.0.0/24"])
    assert GLOBAL not in entries and other not in entries and "104.16.0.9" not in entries
    # The address the router calls from, even when its own Suricata alerts on it.
    entries = blocked(fixture_ruleset, both, [GLOBAL], own_addresses=[GLOBAL])
    assert GLOBAL not in entries and other in entries
    # Only globally routable unicast addresses, from the compromised list too.
    entries = blocked(fixture_ruleset, [], ["10.1.2.3", "224.0.0.5", "0.0.0.0", "::1", other])
    assert list(entries) == [other]


def test_fired_rules_take_at_most_their_share(corpus_ruleset):
    """2,000 posted alerts with chosen sids turned a 550-rule payload into 2,005 rules."""
    eligible = [rule["sid"] for rule in corpus_ruleset.rules if rule["eligible"]][:2000]
    fired = [(sid, 1, 3) for sid in eligible[10:]] + [(sid, 50, 1) for sid in eligible[:10]]
    limits = PayloadLimits(sample_count=550, firewall_max_entries=10, fired_share=0.5)
    result = generate(corpus_ruleset, TelemetrySummary(fired=fired), [], limits, 1)
    reasons = [rule["reason"] for rule in result.ids["rules"]]
    assert len(reasons) <= 550 and reasons.count("fired") <= 275
    assert reasons.count("sampled") >= 200
    kept = {rule["sid"] for rule in result.ids["rules"] if rule["reason"] == "fired"}
    assert set(eligible[:10]) <= kept  # the most severe and most alerted first


def test_rule_whose_bit_nothing_sets_is_left_out(fixture_ruleset):
    # 9000011 checks TEST.mail (isnotset) but no rule sets it; it is disabled anyway, and
    # 9000009 checks TEST.a|TEST.b where only TEST.a has a setter: it brings 9000010.
    result = generate(fixture_ruleset, TelemetrySummary(fired=[(9000009, 1, 1)]), [],
                      PayloadLimits(sample_count=100, firewall_max_entries=10), 1)
    sids = {r["sid"]: r["reason"] for r in result.ids["rules"]}
    assert 9000009 not in sids  # TEST.b is set by nothing
    checked_bits_are_set(result.ids["rules"], fixture_ruleset)


def test_firewall_limit_and_truncation(fixture_ruleset):
    result = generate(fixture_ruleset, TelemetrySummary(), ["185.220.101.1", "185.220.101.2",
                                                            "185.220.101.3"],
                      PayloadLimits(sample_count=3, firewall_max_entries=2), 1)
    assert result.firewall["entry_count"] == 2 and result.firewall["truncated"] is True


def test_a_routers_declared_bounds_lower_the_operators(fixture_ruleset):
    compromised = ["185.220.101.1", "185.220.101.2", "185.220.101.3"]
    limits = PayloadLimits(sample_count=100, firewall_max_entries=100)
    whole = generate(fixture_ruleset, TelemetrySummary(), compromised, limits, 1)
    assert whole.ids["rule_count"] > 3 and whole.firewall["entry_count"] == 3
    small = generate(fixture_ruleset, TelemetrySummary(holds=Holds(rules=3, sets=1)),
                     compromised, limits, 1)
    assert small.ids["rule_count"] == 3 and small.firewall["entry_count"] == 1
    assert small.firewall["truncated"] is True
    checked_bits_are_set(small.ids["rules"], fixture_ruleset)
    # A router declaring more than the operator allows gets the operator's bounds.
    large = generate(fixture_ruleset, TelemetrySummary(holds=Holds(rules=10**15, sets=10**15)),
                     compromised, limits, 1)
    assert large.ids == whole.ids and large.firewall == whole.firewall
    nothing = generate(fixture_ruleset, TelemetrySummary(holds=Holds(rules=0, sets=0)),
                       compromised, limits, 1)
    assert nothing.ids["rule_count"] == 0 and nothing.firewall["entry_count"] == 0


JA4_RULES = (b'alert tls any any -> any any (msg:"TEST JA4 client"; ja4.hash; '
             b'content:"t13d1516h2_8daaf6152771_02713d6af862"; flowbits:set,TEST.ja4; '
             b'flowbits:noalert; sid:9100001; rev:1;)\n'
             b'alert tls any any -> any any (msg:"TEST after the JA4 client"; '
             b'flowbits:isset,TEST.ja4; sid:9100002; rev:1;)\n'
             b'alert tls any any -> any any (msg:"TEST a message naming ja4.hash; only"; '
             b'tls.sni; content:"example.com"; sid:9100003; rev:1;)\n')


@pytest.fixture(scope="module")
def ja4_ruleset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ja4-ruleset")
    archive = tmp / "archive.zip"
    archive.write_bytes(make_zip(fixture_members({"rules/ja4-test.rules": JA4_RULES})))
    return load_ruleset(publish(tmp, archive))


def test_a_ja4_rule_reaches_only_a_router_that_declared_ja4(ja4_ruleset):
    fired = [(9100001, 5, 1), (9100002, 5, 1), (9100003, 5, 1)]
    limits = PayloadLimits(sample_count=100, firewall_max_entries=10, fired_share=1.0)
    overrides = [(1, "enable", "9100001", False)]  # not even an operator's enable

    def sids(ja4: bool) -> set[int]:
        summary = TelemetrySummary(fired=fired, overrides=overrides, holds=Holds(ja4=ja4))
        return {rule["sid"] for rule in generate(ja4_ruleset, summary, [], limits, 1
                                                 ).ids["rules"]}

    assert {9100001, 9100002, 9100003} <= sids(True)
    without = sids(False)
    # The JA4 rule is left out, and so is the rule whose flowbit only it sets; a message
    # that names the keyword is no JA4 rule.
    assert 9100001 not in without and 9100002 not in without and 9100003 in without


def test_corpus_generation_is_deterministic_and_closed(corpus_ruleset):
    summary = TelemetrySummary(fired=[(sid, 1, 2) for sid in (2010935, 2010936, 2018489,
                                                               2200073)],
                               app_protos=["dns", "tls"], dest_ports=[53, 443, 8080])
    limits = PayloadLimits(sample_count=550, firewall_max_entries=10_000)
    first = generate(corpus_ruleset, summary, corpus_ruleset.compromised_ips, limits,
                     seed_for(MAC, corpus_ruleset.version))
    again = generate(corpus_ruleset, summary, corpus_ruleset.compromised_ips, limits,
                     seed_for(MAC, corpus_ruleset.version))
    assert first.ids == again.ids and first.firewall == again.firewall
    other = generate(corpus_ruleset, summary, corpus_ruleset.compromised_ips, limits,
                     seed_for("aa:bb:cc:00:00:34", corpus_ruleset.version))
    assert other.ids != first.ids  # another router gets another sample
    sids = {r["sid"] for r in first.ids["rules"]}
    assert {2010935, 2010936, 2018489} <= sids  # fired and enabled in the ruleset
    assert first.ids["rule_count"] == 550
    checked_bits_are_set(first.ids["rules"], corpus_ruleset)
    assert first.firewall["entry_count"] == 713


def test_flows_tilt_the_sample(corpus_ruleset):
    limits = PayloadLimits(sample_count=550, firewall_max_entries=10)

    def share(summary: TelemetrySummary, app: str) -> float:
        total = 0.0
        for n in range(5):
            rules = generate(corpus_ruleset, summary, [], limits, n).ids["rules"]
            by_sid = corpus_ruleset.by_sid
            total += sum(by_sid[r["sid"]]["app_proto"] == app for r in rules
                         if r["sid"] in by_sid) / len(rules)
        return total / 5

    assert share(TelemetrySummary(app_protos=["dns"]), "dns") > \
        1.5 * share(TelemetrySummary(), "dns")


def overridden(fixture_ruleset, overrides, fired=(), sample_count=6) -> dict[int, dict]:
    summary = TelemetrySummary(fired=[(sid, 1, 1) for sid in fired], overrides=overrides)
    result = generate(fixture_ruleset, summary, [],
                      PayloadLimits(sample_count=sample_count, firewall_max_entries=10,
                                    fired_share=1.0), 3)
    return {rule["sid"]: rule for rule in result.ids["rules"]}


def test_disabled_rules_never_appear_even_as_setters(fixture_ruleset):
    assert 9000001 in overridden(fixture_ruleset, [], fired=[9000001])
    rules = overridden(fixture_ruleset, [(1, "disable", "9000001", False)], fired=[9000001])
    assert 9000001 not in rules
    # 9000003 checks TEST.beacon, set only by 9000002: disabling the setter keeps it out too.
    rules = overridden(fixture_ruleset, [(2, "disable", "9000002", False)], fired=[9000003])
    assert 9000002 not in rules and 9000003 not in rules
    rules = overridden(fixture_ruleset, [(3, "disable", "classtype:attempted-recon", False)],
                       fired=[9000001], sample_count=100)
    assert 9000001 not in rules


def test_enabled_rules_are_always_in_with_their_setters(fixture_ruleset):
    # 9000004 ships commented out: an enable override still puts it in, before fired rules.
    rules = overridden(fixture_ruleset, [(7, "enable", "9000004", False),
                                         (8, "enable", "re:beacon stage 2", False)],
                       sample_count=3)
    assert rules[9000004]["reason"] == "override" and rules[9000004]["override"] == 7
    assert rules[9000003]["reason"] == "override" and rules[9000003]["override"] == 8
    assert rules[9000002]["reason"] == "flowbits" and "override" not in rules[9000002]
    assert len(rules) == 3  # within the budget


def test_the_routers_own_override_beats_the_fleets_and_disable_beats_enable(fixture_ruleset):
    fleet_off_router_on = [(1, "disable", "9000001", False), (2, "enable", "9000001", True)]
    assert overridden(fixture_ruleset, fleet_off_router_on)[9000001]["reason"] == "override"
    fleet_on_router_off = [(1, "enable", "9000001", False), (2, "disable", "9000001", True)]
    assert 9000001 not in overridden(fixture_ruleset, fleet_on_router_off)
    same_level = [(1, "enable", "9000001", False), (2, "disable", "9000001", False)]
    assert 9000001 not in overridden(fixture_ruleset, same_level)


@pytest.mark.parametrize("text,sids", [
    ("9000001", {9000001}), ("1:9000001", {9000001}), ("2:9000001", set()),
    ("group:other-test.rules", {9000011}),  # its 9000007 is superseded by a higher rev
    ("classtype:misc-activity", {9000007}),
    ("re:TEST (drop|sets) ", {9000009, 9000010})])
def test_selectors(fixture_ruleset, text, sids):
    selector = Selector.parse(text)
    assert {fixture_ruleset.all_rules[i]["sid"]
            for i in matching(fixture_ruleset.all_rules, selector)} == sids


@pytest.mark.parametrize("text", ["", "re:(", "sid:5", "group:", "1:2:3", "x" * 501])
def test_bad_selectors_are_refused(text):
    with pytest.raises(ValueError):
        Selector.parse(text)
