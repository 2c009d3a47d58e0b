"""The weighted ruleset as generation needs it, loaded from `rulefile_json/` once per process
and per published version.

Only eligible rules (enabled, not deleted, not superseded by a higher rev) are sampled; the
other enabled-or-not rules are kept aside as possible flowbit setters, because a sampled rule
that checks a flowbit must bring a rule that sets it (as suricata-update's FlowbitResolver
does, a disabled setter may be brought in; deleted rules never are).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ruledata.build import MANIFEST
from ruledata.compromised import read_compromised_ips

RULE_FIELDS = ("gid", "sid", "rev", "action", "msg", "classtype", "app_proto", "dst_port",
               "flowbits", "noalert", "weight", "raw", "eligible")
# Checking commands: a rule using them needs a rule that sets the bit.
FLOWBIT_CHECKS = ("isset", "isnotset")
FLOWBIT_SETS = ("set", "setx", "toggle")


@dataclass
class Ruleset:
    version: str
    directory: Path
    rules: list[dict]                                 # eligible rules, file order
    by_sid: dict[int, dict]                           # eligible rules by sid (gid 1 first)
    setters: dict[str, list[dict]] = field(default_factory=dict)  # bit -> rules, best first
    compromised_ips: list[str] = field(default_factory=list)


def load_ruleset(version_dir: Path) -> Ruleset:
    """Load a published ruleset (`versions/<stamp>`, or `current` resolved by the caller)."""
    json_dir = version_dir / "rulefile_json"
    manifest = orjson.loads((json_dir / MANIFEST).read_bytes())
    superseded = {(file, position) for _, _, file, position in manifest["superseded"]}
    eligible: list[dict] = []
    candidates: list[dict] = []  # every non-deleted, non-superseded rule (setter candidates)
    for name in manifest["files"]:
        document = orjson.loads((json_dir / name).read_bytes())
        for position, rule in enumerate(document["rules"]):
            if (document["file"], position) in superseded or rule["deleted"]:
                continue
            kept = {key: rule[key] for key in RULE_FIELDS}
            candidates.append(kept)
            if rule["eligible"]:
                eligible.append(kept)
    by_sid: dict[int, dict] = {}
    for rule in eligible:
        if rule["sid"] not in by_sid or rule["gid"] == 1:
            by_sid[rule["sid"]] = rule
    compromised = read_compromised_ips(version_dir / "rules" / "rules" / "compromised-ips.txt")
    return Ruleset(manifest["version"], version_dir, eligible, by_sid, _setters(candidates),
                   compromised)


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
