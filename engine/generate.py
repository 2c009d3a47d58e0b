"""Adaptive generation for one router: a pure function of (ruleset, telemetry summary,
compromised IPs, limits, seed). No web, no database, no clock: the same inputs give the same
payloads, byte for byte.

IDS payload
1. Every eligible rule whose sid fired for this router (in the summary window) is kept.
2. The other eligible rules are drawn by weight without replacement (Efraimidis–Spirakis:
   key = u^(1/w), largest keys first), with the weight raised for what the router's flows
   show: ×APP_PROTO_BOOST when the rule inspects an application protocol seen in its flows,
   ×PORT_BOOST when its destination ports name a port seen there.
3. Flowbits are closed over: a rule that checks a bit (`isset`/`isnotset`) brings a rule that
   sets it (the best eligible setter, else a disabled one), recursively, and the whole group
   is counted in the budget; a rule whose bit nothing sets is left out.
4. Drawing stops when RULE_GENERATION_SAMPLE_COUNT rules are in (fired rules are kept even
   beyond it).

Firewall payload: one block entry per address, from the router's own high-severity alerts
(the external endpoint of each) first, then `compromised-ips.txt`; deduplicated with every
reason kept, bounded by the firewall size limit.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import random
import re
from dataclasses import dataclass, field

from engine.ruleset import FLOWBIT_CHECKS, Ruleset

APP_PROTO_BOOST = 3.0
PORT_BOOST = 2.0
# Suricata's default port variables, for rules written with them.
PORT_VARIABLES = {"$HTTP_PORTS": "80", "$SSH_PORTS": "22", "$FTP_PORTS": "21",
                  "$ORACLE_PORTS": "1521", "$DNP3_PORTS": "20000", "$MODBUS_PORTS": "502",
                  "$FILE_DATA_PORTS": "[80,110,143]", "$GENEVE_PORTS": "6081",
                  "$VXLAN_PORTS": "4789", "$TEREDO_PORTS": "3544", "$SHELLCODE_PORTS": "!80"}


@dataclass
class TelemetrySummary:
    """What the router's recent telemetry says (built by the server from the database)."""
    fired_sids: list[int] = field(default_factory=list)
    app_protos: list[str] = field(default_factory=list)
    dest_ports: list[int] = field(default_factory=list)
    # (external address, signature id, severity, alert count)
    alert_endpoints: list[tuple[str, int, int, int]] = field(default_factory=list)


@dataclass
class Limits:
    sample_count: int
    firewall_max_entries: int


def seed_for(mac: str, version: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{mac}|{version}".encode()).digest()[:8], "big")


@dataclass
class Generated:
    ids: dict
    firewall: dict
    stats: dict


def generate(ruleset: Ruleset, summary: TelemetrySummary, compromised_ips: list[str],
             limits: Limits, seed: int) -> Generated:
    chosen, reasons = _choose_rules(ruleset, summary, limits.sample_count, random.Random(seed))
    rules = sorted(chosen, key=lambda r: (r["gid"], r["sid"]))
    ids = {"version": ruleset.version, "rule_count": len(rules), "rules": [
        {"gid": r["gid"], "sid": r["sid"], "rev": r["rev"], "action": r["action"],
         "msg": r["msg"], "classtype": r["classtype"], "weight": r["weight"],
         "reason": reasons[id(r)], "raw": r["raw"]} for r in rules]}
    entries, truncated = _block_entries(summary.alert_endpoints, compromised_ips,
                                        limits.firewall_max_entries)
    firewall = {"version": ruleset.version, "entry_count": len(entries),
                "truncated": truncated, "entries": entries}
    counts = {"fired": 0, "sampled": 0, "flowbits": 0}
    for rule in rules:
        counts[reasons[id(rule)]] += 1
    stats = {"rules": len(rules), "from_alerts": counts["fired"], "sampled": counts["sampled"],
             "flowbit_setters": counts["flowbits"], "firewall_entries": len(entries),
             "firewall_from_alerts": sum(1 for e in entries if "alert" in e["reasons"])}
    return Generated(ids, firewall, stats)


def _choose_rules(ruleset: Ruleset, summary: TelemetrySummary, budget: int,
                  rng: random.Random) -> tuple[list[dict], dict[int, str]]:
    chosen: list[dict] = []
    reasons: dict[int, str] = {}

    def take(group: list[dict], reason: str) -> None:
        for position, rule in enumerate(group):
            chosen.append(rule)
            reasons[id(rule)] = reason if position == 0 else "flowbits"

    for sid in sorted(set(summary.fired_sids)):
        rule = ruleset.by_sid.get(sid)
        if rule is not None and id(rule) not in reasons:
            group = _with_setters(rule, ruleset, reasons)
            if group is not None:
                take(group, "fired")
    apps, ports = set(summary.app_protos), set(summary.dest_ports)
    for rule in _weighted_order(ruleset.rules, apps, ports, rng):
        if len(chosen) >= budget:
            break
        if id(rule) in reasons:
            continue
        group = _with_setters(rule, ruleset, reasons)
        if group is not None and len(chosen) + len(group) <= budget:
            take(group, "sampled")
    return chosen, reasons


def _weighted_order(rules: list[dict], apps: set[str], ports: set[int],
                    rng: random.Random) -> list[dict]:
    """A random permutation where heavier rules come first more often: sorting by
    log(u)/w is sampling by weight without replacement."""
    keyed = []
    for rule in rules:
        weight = rule["weight"]
        if apps and rule["app_proto"] in apps:
            weight *= APP_PROTO_BOOST
        if ports and _ports_match(rule["dst_port"], ports):
            weight *= PORT_BOOST
        u = rng.random() or 1e-300
        keyed.append((math.log(u) / weight, rule["sid"], rule))
    keyed.sort(key=lambda item: (item[0], -item[1]), reverse=True)
    return [rule for _, _, rule in keyed]


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


_PORT_ITEM = re.compile(r"^(\d*)(:?)(\d*)$")


def _ports_match(spec: str, seen: set[int]) -> bool:
    """True when a specific port list (not `any`, not a negation) names a seen port."""
    spec = PORT_VARIABLES.get(spec, spec)
    if spec in ("any", "") or spec.startswith("!") or spec.startswith("$"):
        return False
    for item in spec.strip("[]").split(","):
        match = _PORT_ITEM.match(PORT_VARIABLES.get(item.strip(), item.strip()))
        if not match:
            continue
        low, colon, high = match.groups()
        first = int(low) if low else 0
        last = (int(high) if high else 65535) if colon else first
        if any(first <= port <= last for port in seen):
            return True
    return False


def _block_entries(alert_endpoints: list[tuple[str, int, int, int]], compromised: list[str],
                   limit: int) -> tuple[list[dict], bool]:
    entries: dict[str, dict] = {}
    ordered = sorted(alert_endpoints, key=lambda e: (-e[3], e[2], e[0], e[1]))
    for address, sid, severity, count in ordered:
        entry = entries.setdefault(address, _entry(address))
        if "alert" not in entry["reasons"]:
            entry["reasons"].append("alert")
        entry["alerts"].append({"sid": sid, "severity": severity, "count": count})
    for address in compromised:
        entry = entries.setdefault(address, _entry(address))
        if "compromised-ips" not in entry["reasons"]:
            entry["reasons"].append("compromised-ips")
    values = list(entries.values())
    for entry in values:
        if not entry["alerts"]:
            del entry["alerts"]
    return values[:limit], len(values) > limit


def _entry(address: str) -> dict:
    network = ipaddress.ip_network(address, strict=False)
    return {"address": address, "family": network.version, "reasons": [], "alerts": []}
