"""Adaptive generation for one router: a pure function of (ruleset, telemetry summary,
compromised IPs, limits, seed). No web, no database, no clock: the same inputs give the same
payloads, byte for byte.

IDS payload
1. Eligible rules whose sid fired for this router (in the summary window) are kept, most
   severe and most alerted first, up to FIRED share of the budget (with their flowbit
   setters): posting alerts with chosen sids cannot crowd the sample out.
2. The other eligible rules are drawn by weight without replacement (Efraimidis–Spirakis:
   key = u^(1/w), largest keys first), with the weight raised for what the router's flows
   show: ×APP_PROTO_BOOST when the rule inspects an application protocol seen in its flows,
   ×PORT_BOOST when its destination ports name a port seen there.
3. Flowbits are closed over: a rule that checks a bit (`isset`/`isnotset`) brings a rule that
   sets it (the best eligible setter, else a disabled one), recursively, and the whole group
   is counted in the budget; a rule whose bit nothing sets is left out.
4. Drawing stops when RULE_GENERATION_SAMPLE_COUNT rules are in (fired ones included).

Firewall payload: see engine/firewall.py.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field

from engine.firewall import AlertRow, Exemptions, firewall_entries
from engine.ruleset import Ruleset
from ruledata.parser import FLOWBIT_CHECKS

APP_PROTO_BOOST = 3.0
PORT_BOOST = 2.0


# A sid that fired for the router: (sid, alert count, most severe severity).
FiredRow = tuple[int, int, int]


@dataclass
class TelemetrySummary:
    """What the router's recent telemetry says (built by the server from the database), and
    what must never be blocked for it."""
    fired: list[FiredRow] = field(default_factory=list)
    app_protos: list[str] = field(default_factory=list)
    dest_ports: list[int] = field(default_factory=list)
    alerts: list[AlertRow] = field(default_factory=list)  # of blocking severity only
    own_addresses: list[str] = field(default_factory=list)  # where the router called from
    allowlist: list[str] = field(default_factory=list)      # networks, fleet's and its own


@dataclass
class PayloadLimits:
    sample_count: int
    firewall_max_entries: int
    fired_share: float = 0.5     # of sample_count, at most, for rules that fired
    block_min_alerts: int = 3    # alerts an address needs before it is blocked


def seed_for(mac: str, version: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{mac}|{version}".encode()).digest()[:8], "big")


@dataclass
class Generated:
    ids: dict
    firewall: dict
    stats: dict


def generate(ruleset: Ruleset, summary: TelemetrySummary, compromised_ips: list[str],
             limits: PayloadLimits, seed: int) -> Generated:
    chosen, reasons = _choose_rules(ruleset, summary, limits, random.Random(seed))
    rules = sorted(chosen, key=lambda r: (r["gid"], r["sid"]))
    ids = {"version": ruleset.version, "rule_count": len(rules), "rules": [
        {"gid": r["gid"], "sid": r["sid"], "rev": r["rev"], "action": r["action"],
         "msg": r["msg"], "classtype": r["classtype"], "weight": r["weight"],
         "reason": reasons[id(r)], "raw": r["raw"]} for r in rules]}
    entries, truncated = firewall_entries(
        summary.alerts, compromised_ips, limits.firewall_max_entries, limits.block_min_alerts,
        Exemptions.of(summary.allowlist, summary.own_addresses))
    firewall = {"version": ruleset.version, "entry_count": len(entries),
                "truncated": truncated, "entries": entries}
    counts = {"fired": 0, "sampled": 0, "flowbits": 0}
    for rule in rules:
        counts[reasons[id(rule)]] += 1
    stats = {"rules": len(rules), "from_alerts": counts["fired"], "sampled": counts["sampled"],
             "flowbit_setters": counts["flowbits"], "firewall_entries": len(entries),
             "firewall_from_alerts": sum(1 for e in entries if "alert" in e["reasons"])}
    return Generated(ids, firewall, stats)


def _choose_rules(ruleset: Ruleset, summary: TelemetrySummary, limits: PayloadLimits,
                  rng: random.Random) -> tuple[list[dict], dict[int, str]]:
    budget = limits.sample_count
    fired_budget = int(budget * limits.fired_share)
    chosen: list[dict] = []
    reasons: dict[int, str] = {}

    def take(group: list[dict], reason: str) -> None:
        for position, rule in enumerate(group):
            chosen.append(rule)
            reasons[id(rule)] = reason if position == 0 else "flowbits"

    for sid, _, _ in sorted(summary.fired, key=lambda row: (row[2], -row[1], row[0])):
        rule = ruleset.by_sid.get(sid)
        if rule is not None and id(rule) not in reasons:
            group = _with_setters(rule, ruleset, reasons)
            if group is not None and len(chosen) + len(group) <= fired_budget:
                take(group, "fired")
    apps, ports = set(summary.app_protos), set(summary.dest_ports)
    for rule in _weighted_order(ruleset, apps, ports, rng):
        if len(chosen) >= budget:
            break
        if id(rule) in reasons:
            continue
        group = _with_setters(rule, ruleset, reasons)
        if group is not None and len(chosen) + len(group) <= budget:
            take(group, "sampled")
    return chosen, reasons


def _weighted_order(ruleset: Ruleset, apps: set[str], ports: set[int],
                    rng: random.Random) -> list[dict]:
    """A random permutation where heavier rules come first more often: sorting by
    log(u)/w is sampling by weight without replacement."""
    weights = list(ruleset.weights)
    for app in apps:
        for index in ruleset.by_app_proto.get(app, ()):
            weights[index] *= APP_PROTO_BOOST
    for index in _port_matches(ruleset, ports):
        weights[index] *= PORT_BOOST
    draw, log = rng.random, math.log
    keys = [log(draw() or 1e-300) / weight for weight in weights]
    rules = ruleset.rules
    return [rules[i] for i in sorted(range(len(keys)), key=keys.__getitem__, reverse=True)]


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
    some checked bit has no setter at all."""
    group, seen, pending = [rule], {id(rule)}, [rule]
    while pending:
        current = pending.pop()
        for command in FLOWBIT_CHECKS:
            for bit in current["flowbits"].get(command, ()):
                setters = ruleset.setters.get(bit)
                if not setters:
                    return None
                if any(id(s) in included or id(s) in seen for s in setters):
                    continue
                setter = setters[0]
                seen.add(id(setter))
                group.append(setter)
                pending.append(setter)
    return group
