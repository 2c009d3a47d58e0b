"""Adaptive generation for one router: a pure function of (ruleset, telemetry summary,
compromised IPs, limits, seed). No web, no database, no clock: the same inputs give the same
payloads, byte for byte.

IDS payload (operators' overrides first: engine/overrides.py)
0. Rules an override enables are taken first, within the budget; rules an override disables
   are never taken, not even as flowbit setters.
1. Eligible rules whose sid fired for this router (in the summary window) are kept, most
   severe and most alerted first, up to FIRED share of the budget (with their flowbit
   setters): posting alerts with chosen sids cannot crowd the sample out.
   Then eligible rules whose sid fires across the fleet (outbreaks, engine/fleet.py) are
   kept, the ruleset's own weight first (never the severity reporters claim), then the most
   widely seen, up to FLEET share of the budget (reason
   `fleet`): a router that has not met an outbreak yet carries its rule.
2. The other eligible rules are drawn by weight without replacement (Efraimidis–Spirakis:
   key = u^(1/w), largest keys first), with the weight raised for what the router's flows
   show: ×APP_PROTO_BOOST when the rule inspects an application protocol seen in its flows,
   ×PORT_BOOST when its destination ports name a port seen there.
3. Flowbits are closed over: a rule that checks a bit (`isset`/`isnotset`) brings a rule that
   sets it (the best eligible setter, else a disabled one), recursively, and the whole group
   is counted in the budget; a rule whose bit nothing sets is left out.
4. Drawing stops when RULE_GENERATION_SAMPLE_COUNT rules are in (fired ones included), or
   the rules the router declared it loads, when fewer (`Holds`).
5. A rule naming a JA4 keyword is never taken, nor brought as a setter, for a router that
   did not declare JA4: its Suricata would refuse the whole file.

Firewall payload: see engine/firewall.py; at most the entries one of the router's firewall
sets holds, when it declared fewer than RULE_GENERATION_FIREWALL_MAX_ENTRIES.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field, replace

from engine.firewall import AlertRow, Exemptions, firewall_entries
from engine.intel import INTEL_SID_RANGE
from engine.overrides import OverrideRow, resolve

# Why a rule is in a router's IDS payload (its `reason`), in the order rules are taken.
RULE_SOURCES = ("override", "fired", "fleet", "sampled", "flowbits")
from engine.ruleset import Ruleset
from ruledata.parser import FLOWBIT_CHECKS

APP_PROTO_BOOST = 3.0
PORT_BOOST = 2.0


# A sid that fired for the router: (sid, alert count, most severe severity).
FiredRow = tuple[int, int, int]
# A sid that fires across the fleet: (sid, reporter networks, most severe severity).
OutbreakRow = tuple[int, int, int]


@dataclass(frozen=True)
class Holds:
    """What the router declared it holds (Router-Capacity, docs/router-api.md): the IDS
    rules its Suricata loads, the entries one of its firewall sets holds (None: not said),
    whether its Suricata has JA4."""
    rules: int | None = None
    sets: int | None = None
    ja4: bool = False


@dataclass
class TelemetrySummary:
    """What the router's recent telemetry says (built by the server from the database), and
    what must never be blocked for it."""
    fired: list[FiredRow] = field(default_factory=list)
    app_protos: list[str] = field(default_factory=list)
    dest_ports: list[int] = field(default_factory=list)
    alerts: list[AlertRow] = field(default_factory=list)  # of blocking severity only
    own_addresses: list[str] = field(default_factory=list)  # where the router called from
    allowlist: list[str] = field(default_factory=list)  # allowlists' and intel's held networks
    overrides: list[OverrideRow] = field(default_factory=list)  # the fleet's and its own
    outbreaks: list[OutbreakRow] = field(default_factory=list)  # the fleet's (not its own)
    holds: Holds = field(default_factory=Holds)  # what the router declared


@dataclass
class PayloadLimits:
    sample_count: int
    firewall_max_entries: int
    fired_share: float = 0.5     # of sample_count, at most, for rules that fired
    block_min_alerts: int = 3    # alerts an address needs before it is blocked
    fleet_share: float = 0.1     # of sample_count, at most, for the fleet's outbreaks

    def within(self, holds: Holds) -> "PayloadLimits":
        """These limits, lowered to what a router declared it holds."""
        return replace(self, sample_count=_at_most(self.sample_count, holds.rules),
                       firewall_max_entries=_at_most(self.firewall_max_entries, holds.sets))


def _at_most(limit: int, declared: int | None) -> int:
    return limit if declared is None else min(limit, declared)


def seed_for(mac: str, version: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{mac}|{version}".encode()).digest()[:8], "big")


@dataclass
class Generated:
    ids: dict
    firewall: dict
    stats: dict


def generate(ruleset: Ruleset, summary: TelemetrySummary, compromised_ips: list[str],
             limits: PayloadLimits, seed: int) -> Generated:
    limits = limits.within(summary.holds)
    selection = _choose_rules(ruleset, summary, limits, random.Random(seed))
    reasons = selection.reasons
    rules = sorted(selection.chosen, key=lambda r: (r["gid"], r["sid"]))
    ids = {"version": ruleset.version, "rule_count": len(rules), "rules": [
        _payload_rule(r, reasons[id(r)], selection.why.get(id(r), {})) for r in rules]}
    entries, truncated = firewall_entries(
        summary.alerts, compromised_ips, limits.firewall_max_entries, limits.block_min_alerts,
        Exemptions.of(summary.allowlist, summary.own_addresses), INTEL_SID_RANGE)
    firewall = {"version": ruleset.version, "entry_count": len(entries),
                "truncated": truncated, "entries": entries}
    counts = dict.fromkeys(RULE_SOURCES, 0)
    for rule in rules:
        counts[reasons[id(rule)]] += 1
    stats = {"rules": len(rules), "from_overrides": counts["override"],
             "from_alerts": counts["fired"], "from_fleet": counts["fleet"],
             "sampled": counts["sampled"],
             "flowbit_setters": counts["flowbits"], "firewall_entries": len(entries),
             "firewall_from_alerts": sum(1 for e in entries if "alert" in e["reasons"])}
    return Generated(ids, firewall, stats)


def _payload_rule(rule: dict, reason: str, why: dict) -> dict:
    """A payload entry; `why` adds the reason's evidence: `override` (its id), `alerts` (how
    often it fired), `fleet_networks` (how many networks' routers it fired at), `boosts`
    (what raised its sampling weight), `setter_for` (the sid whose flowbit check brought
    it)."""
    return {"gid": rule["gid"], "sid": rule["sid"], "rev": rule["rev"],
            "action": rule["action"], "msg": rule["msg"], "classtype": rule["classtype"],
            "weight": rule["weight"], "reason": reason, **why, "raw": rule["raw"]}


class _Selection:
    """The rules taken so far, each with its reason; disabled rules count as taken, so that
    nothing takes them (they never enter `chosen`)."""

    def __init__(self, disabled: set[int]):
        self.chosen: list[dict] = []
        self.reasons: dict[int, str] = dict.fromkeys(disabled, "disabled")
        self.why: dict[int, dict] = {}  # id(rule) -> the evidence of its reason

    def group_for(self, rule: dict, ruleset: Ruleset) -> list[dict] | None:
        if id(rule) in self.reasons:
            return None
        return _with_setters(rule, ruleset, self.reasons)

    def take(self, group: list[dict] | None, reason: str, limit: int, why: dict) -> bool:
        if group is None or len(self.chosen) + len(group) > limit:
            return False
        for position, rule in enumerate(group):
            self.chosen.append(rule)
            self.reasons[id(rule)] = reason if position == 0 else "flowbits"
            self.why[id(rule)] = why if position == 0 else {"setter_for": group[0]["sid"]}
        return True


def _choose_rules(ruleset: Ruleset, summary: TelemetrySummary, limits: PayloadLimits,
                  rng: random.Random) -> _Selection:
    budget = limits.sample_count
    overrides = resolve(ruleset, summary.overrides)
    unloadable = set() if summary.holds.ja4 else ruleset.ja4_rules
    selection = _Selection(overrides.disabled | unloadable)
    for rule, override_id in overrides.forced:
        selection.take(selection.group_for(rule, ruleset), "override", budget,
                       {"override": override_id})
    fired_limit = min(budget, len(selection.chosen) + int(budget * limits.fired_share))
    for sid, count, _ in sorted(summary.fired, key=lambda row: (row[2], -row[1], row[0])):
        if (rule := ruleset.by_sid.get(sid)) is not None:
            selection.take(selection.group_for(rule, ruleset), "fired", fired_limit,
                           {"alerts": count})
    fleet_limit = min(budget, len(selection.chosen) + int(budget * limits.fleet_share))
    # Ranked by the ruleset's own weight of the rule (its severity, class priority and
    # confidence), then by networks: never by the severity its reporters claimed.
    outbreaks = [(ruleset.by_sid[sid], networks) for sid, networks, _ in summary.outbreaks
                 if sid in ruleset.by_sid]
    for rule, networks in sorted(outbreaks, key=lambda pair: (-pair[0]["weight"], -pair[1],
                                                              pair[0]["sid"])):
        selection.take(selection.group_for(rule, ruleset), "fleet", fleet_limit,
                       {"fleet_networks": networks})
    order, boosts = _weighted_order(ruleset, set(summary.app_protos), set(summary.dest_ports),
                                    rng)
    for index in order:
        if len(selection.chosen) >= budget:
            break
        rule = ruleset.rules[index]
        why = {"boosts": boosts[index]} if index in boosts else {}
        selection.take(selection.group_for(rule, ruleset), "sampled", budget, why)
    return selection


def _weighted_order(ruleset: Ruleset, apps: set[str], ports: set[int], rng: random.Random
                    ) -> tuple[list[int], dict[int, list[str]]]:
    """A random permutation of the rules' indices where heavier rules come first more often
    (sorting by log(u)/w is sampling by weight without replacement), and the boosts each
    boosted rule got."""
    weights = list(ruleset.weights)
    boosts: dict[int, list[str]] = {}
    for app in apps:
        for index in ruleset.by_app_proto.get(app, ()):
            weights[index] *= APP_PROTO_BOOST
            boosts.setdefault(index, []).append(f"app_proto:{app}")
    for index in _port_matches(ruleset, ports):
        weights[index] *= PORT_BOOST
        boosts.setdefault(index, []).append("dest_port")
    draw, log = rng.random, math.log
    keys = [log(draw() or 1e-300) / weight for weight in weights]
    return sorted(range(len(keys)), key=keys.__getitem__, reverse=True), boosts


def _port_matches(ruleset: Ruleset, ports: set[int]) -> set[int]:
    """Indices of rules whose destination ports name a seen port."""
    matched: set[int] = set()
    for port in ports:
        matched.update(ruleset.by_port.get(port, ()))
    for index, ranges in ruleset.port_ranges:
        if any(low <= port <= high for low, high in ranges for port in ports):
            matched.add(index)
    return matched


def _with_setters(rule: dict, ruleset: Ruleset, included: dict[int, str]) -> list[dict] | None:
    """The rule plus the setters its flowbit checks need (not already included), or None when
    some checked bit has no setter at all (a disabled one does not count)."""
    group, seen, pending = [rule], {id(rule)}, [rule]
    while pending:
        current = pending.pop()
        for command in FLOWBIT_CHECKS:
            for bit in current["flowbits"].get(command, ()):
                setters = [s for s in ruleset.setters.get(bit, ())
                           if included.get(id(s)) != "disabled"]
                if not setters:
                    return None
                if any(id(s) in included or id(s) in seen for s in setters):
                    continue
                setter = setters[0]
                seen.add(id(setter))
                group.append(setter)
                pending.append(setter)
    return group
