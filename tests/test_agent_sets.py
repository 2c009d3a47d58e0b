"""The agent's reading of its nftables sets and the files it changes them with
(agent/nftsets.py), and its enforcement counts across a set filled whole again
(agent/enforcement.py), on `nft -j` output as nftables 1.0.6 prints it."""

from __future__ import annotations

import json

from agent.enforcement import EnforcementReporter
from agent.nftsets import changes_file, element, listed, whole_file
from tests.test_agent import config_for

# `nft -j list set inet t s` of an interval set declared with `counter` (nftables 1.0.6).
COUNTED = json.loads("""{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
 {"set": {"family": "inet", "name": "s", "table": "t", "type": "ipv4_addr", "handle": 1,
  "flags": ["interval"], "elem": [
   {"elem": {"val": {"prefix": {"addr": "198.51.100.0", "len": 24}},
             "counter": {"packets": 3, "bytes": 180}}},
   {"elem": {"val": "203.0.113.5", "counter": {"packets": 7, "bytes": 420}}}],
  "stmt": [{"counter": null}]}}]}""")
# The same set declared without `counter`, and one empty.
UNCOUNTED = {"nftables": [{"set": {"name": "s", "elem": [
    {"prefix": {"addr": "198.51.100.0", "len": 24}}, "203.0.113.5"]}}]}
EMPTY = {"nftables": [{"set": {"name": "s"}}]}


def test_a_set_listing_gives_its_elements_and_their_counts():
    assert listed(COUNTED) == {"198.51.100.0/24": (3, 180), "203.0.113.5": (7, 420)}
    assert listed(UNCOUNTED) == {"198.51.100.0/24": None, "203.0.113.5": None}
    assert listed(EMPTY) == {}
    assert element("203.0.113.5/32") == "203.0.113.5" and element("2001:db8::/32") == \
        "2001:db8::/32"


def test_a_change_deletes_and_adds_only_what_changed():
    held = {"a4": {"203.0.113.5": (7, 420), "203.0.113.6": (0, 0)}, "a6": {}}
    wanted = {"a4": ["203.0.113.5", "203.0.113.7"], "a6": ["2001:db8::1"]}
    assert changes_file("inet filter", wanted, held, "x").decode().splitlines()[1:] == [
        "delete element inet filter a4 { 203.0.113.6 }",
        "add element inet filter a4 { 203.0.113.7 }",
        "add element inet filter a6 { 2001:db8::1 }"]
    assert whole_file("inet filter", wanted, "x").decode().splitlines()[1:] == [
        "flush set inet filter a4", "add element inet filter a4 { 203.0.113.5, 203.0.113.7 }",
        "flush set inet filter a6", "add element inet filter a6 { 2001:db8::1 }"]


def test_counts_grow_across_readings_and_a_set_filled_again(tmp_path):
    config = config_for(tmp_path, "http://127.0.0.1:9", enforcement_seconds=60)
    config.state_dir.mkdir()
    reporter = EnforcementReporter(config, client=None)
    reporter.counted("firewall", [{"203.0.113.5": (7, 420)}])
    reporter.counted("firewall", [{"203.0.113.5": (9, 540), "203.0.113.6": (1, 60)}])
    reporter.counted("firewall", [{"203.0.113.5": (2, 120)}])  # filled whole again: from 0
    reporter.counted("fleet", [{"198.51.100.1": None}])          # no counters: nothing
    again = EnforcementReporter(config, client=None)             # kept across restarts
    assert again.pending() == {"lists": {"firewall": {
        "packets": 12, "bytes": 720, "entries": [
            {"address": "203.0.113.5", "packets": 11, "bytes": 660},
            {"address": "203.0.113.6", "packets": 1, "bytes": 60}]}}}
