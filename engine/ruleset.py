"""The weighted ruleset as generation needs it, loaded from `rulefile_json/` once per process
and per published version.

Only eligible rules (enabled, not deleted, not superseded by a higher rev) are sampled; the
other enabled-or-not rules are kept aside as possible flowbit setters, because a sampled rule
that checks a flowbit must bring a rule that sets it (as suricata-update's FlowbitResolver
does, a disabled setter may be brought in; deleted rules never are).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import orjson

from ruledata.build import MANIFEST
from ruledata.compromised import compromised_ips_of
from ruledata.parser import FLOWBIT_SETS

# A JA4 keyword as a rule option (`ja4.hash;`, a sticky buffer), not a word in a message.
JA4_KEYWORD = re.compile(r"[;(]\s*ja4\.[a-z_.]+\s*[;:]")

RULE_FIELDS = ("gid", "sid", "rev", "action", "msg", "classtype", "app_proto", "dst_port",
               "flowbits", "noalert", "weight", "raw", "eligible", "file")


@dataclass
class Ruleset:
    version: str
    directory: Path
    rules: list[dict]                                 # eligible rules, file order
    by_sid: dict[int, dict]                           # eligible rules by sid (gid 1 first)
    setters: dict[str, list[dict]] = field(default_factory=dict)  # bit -> rules, best first
    compromised_ips: list[str] = field(default_factory=list)
    # Every rule neither deleted nor superseded, enabled or not (what overrides select from).
    all_rules: list[dict] = field(default_factory=list)
    # Indexes into `rules`, built once so each generation only touches what matches.
    weights: list[float] = field(default_factory=list)
    by_app_proto: dict[str, list[int]] = field(default_factory=dict)
    by_port: dict[int, list[int]] = field(default_factory=dict)
    port_ranges: list[tuple[int, list[tuple[int, int]]]] = field(default_factory=list)
    # id() of the rules naming a JA4 keyword, which a Suricata without JA4 refuses to load.
    ja4_rules: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.weights = [rule["weight"] for rule in self.rules]
        self.ja4_rules = {id(rule) for rule in self.all_rules or self.rules
                          if JA4_KEYWORD.search(rule["raw"])}
        for index, rule in enumerate(self.rules):
            if rule["app_proto"]:
                self.by_app_proto.setdefault(rule["app_proto"], []).append(index)
            ranges = parse_ports(rule["dst_port"])
            wide = [(low, high) for low, high in ranges if high - low > 64]
            for low, high in ranges:
                if high - low <= 64:
                    for port in range(low, high + 1):
                        self.by_port.setdefault(port, []).append(index)
            if wide:
                self.port_ranges.append((index, wide))


def published_manifest(version_dir: Path) -> dict:
    return orjson.loads((version_dir / "rulefile_json" / MANIFEST).read_bytes())


def usable_rules(version_dir: Path, manifest: dict) -> Iterator[dict]:
    """Every published rule, whole, that is neither deleted nor superseded by a higher rev:
    what generation can take (eligible ones) or bring as a flowbit setter."""
    json_dir = version_dir / "rulefile_json"
    superseded = {(file, position) for _, _, file, position in manifest["superseded"]}
    for name in manifest["files"]:
        document = orjson.loads((json_dir / name).read_bytes())
        for position, rule in enumerate(document["rules"]):
            if (document["file"], position) not in superseded and not rule["deleted"]:
                yield rule


def signature_names(version_dir: Path) -> dict[int, str]:
    """Each usable rule's message by its sid, as reports name a signature."""
    return {rule["sid"]: rule["msg"] for rule in usable_rules(version_dir,
                                                             published_manifest(version_dir))}


def load_ruleset(version_dir: Path) -> Ruleset:
    """Load a published ruleset (`versions/<stamp>`, or `current` resolved by the caller)."""
    manifest = published_manifest(version_dir)
    eligible: list[dict] = []
    candidates: list[dict] = []  # every usable rule (setter candidates, override targets)
    for rule in usable_rules(version_dir, manifest):
        kept = {key: rule[key] for key in RULE_FIELDS}
        candidates.append(kept)
        if rule["eligible"]:
            eligible.append(kept)
    by_sid: dict[int, dict] = {}
    for rule in eligible:
        if rule["sid"] not in by_sid or rule["gid"] == 1:
            by_sid[rule["sid"]] = rule
    return Ruleset(manifest["version"], version_dir, eligible, by_sid, _setters(candidates),
                   compromised_ips_of(version_dir), candidates)


# Suricata's default port variables, for rules written with them.
PORT_VARIABLES = {"$HTTP_PORTS": "80", "$SSH_PORTS": "22", "$FTP_PORTS": "21",
                  "$ORACLE_PORTS": "1521", "$DNP3_PORTS": "20000", "$MODBUS_PORTS": "502",
                  "$FILE_DATA_PORTS": "[80,110,143]", "$GENEVE_PORTS": "6081",
                  "$VXLAN_PORTS": "4789", "$TEREDO_PORTS": "3544"}
_PORT_ITEM = re.compile(r"^(\d*)(:?)(\d*)$")


def parse_ports(spec: str) -> list[tuple[int, int]]:
    """Port ranges a destination-port spec names specifically; [] for `any`, negations and
    unknown variables (they say nothing about which port the rule is for)."""
    spec = PORT_VARIABLES.get(spec, spec)
    if spec in ("any", "") or spec.startswith("!") or spec.startswith("$"):
        return []
    ranges = []
    for item in spec.strip("[]").split(","):
        item = PORT_VARIABLES.get(item.strip(), item.strip())
        match = _PORT_ITEM.match(item)
        if not match or not (match.group(1) or match.group(3)):
            continue
        low, colon, high = match.groups()
        first = int(low) if low else 0
        last = (int(high) if high else 65535) if colon else first
        ranges.append((first, min(last, 65535)))
    return ranges


def _setters(rules: list[dict]) -> dict[str, list[dict]]:
    """bit -> setter rules, eligible ones first, then by weight, then by sid (deterministic)."""
    setters: dict[str, list[dict]] = {}
    for rule in rules:
        for command in FLOWBIT_SETS:
            for bit in rule["flowbits"].get(command, ()):
                setters.setdefault(bit, []).append(rule)
    for candidates in setters.values():
        candidates.sort(key=lambda r: (not r["eligible"], -r["weight"], r["sid"]))
    return setters


class RulesetCache:
    """One ruleset in memory per process; reloaded only when a new version is asked for."""

    def __init__(self) -> None:
        self._ruleset: Ruleset | None = None

    def get(self, version_dir: Path) -> Ruleset:
        if self._ruleset is None or self._ruleset.directory != version_dir:
            self._ruleset = load_ruleset(version_dir)
        return self._ruleset
