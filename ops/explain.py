"""`rulegen --mac MAC --explain`: why each rule and firewall entry of a router's payloads is
there, from the payloads' own evidence (`reason` and its fields) and, for sampled rules, the
factors of their weight as ruledata/weights.py computes them; and the entries the router
gets from the fleet's shared list, with the fleet's evidence."""

from __future__ import annotations

import gzip
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import orjson

from engine.ruleset import published_manifest, usable_rules
from ops.fleet import reporters_text
from ruledata.build import newest_update
from ruledata.weights import weight_factors
from server.timestamps import iso_utc


def published_rules(version_dir: Path) -> dict[tuple[int, int], dict]:
    """(gid, sid) -> the rule as published, for the rules generation could take."""
    return {(rule["gid"], rule["sid"]): rule
            for rule in usable_rules(version_dir, published_manifest(version_dir))}


def _factors(rule: dict, newest) -> str:
    factors = weight_factors(rule, rule["class_priority"], newest)
    return " × ".join(f"{name.replace('_', ' ')} {value:g}" for name, value in factors.items())


def _rule_line(entry: dict, published: dict, newest, window_days: int) -> str:
    head = f"  {entry['gid']}:{entry['sid']} {entry['msg']!r}: "
    reason = entry["reason"]
    if reason == "override":
        return head + f"forced by override {entry['override']}"
    if reason == "fired":
        return head + f"fired {entry['alerts']} times in the last {window_days} days"
    if reason == "fleet":
        return head + (f"firing across the fleet: at routers of {entry['fleet_networks']} "
                       "networks")
    if reason == "flowbits":
        return head + f"flowbit setter for {entry['setter_for']}"
    rule = published.get((entry["gid"], entry["sid"]))
    text = head + f"sampled with weight {entry['weight']:g}"
    if rule is not None:
        text += f" = {_factors(rule, newest)}"
    boosts = entry.get("boosts", ())
    if boosts:
        text += "; raised for " + ", ".join(
            f"its application protocol {b.split(':', 1)[1]} (×3)" if b.startswith("app_proto")
            else "a destination port seen in its flows (×2)" for b in boosts)
    return text


def _firewall_line(entry: dict, window_days: int) -> str:
    parts = []
    if "alert" in entry["reasons"]:
        alerts = "; ".join(f"sid {a['sid']} ×{a['count']} (severity {a['severity']}, "
                           f"{a['flows']} flows)" for a in entry["alerts"])
        total = sum(a["count"] for a in entry["alerts"])
        parts.append(f"{total} of its alerts, the last at {_last_alert(entry, window_days)}: "
                     f"{alerts}")
    if "compromised-ips" in entry["reasons"]:
        parts.append("on the compromised-IPs list")
    until = (f"; blocked until {entry['expires_at']}" if entry["expires_at"]
             else "; as long as the list names it")
    return f"  {entry['address']}: " + " and ".join(parts) + until


def _last_alert(entry: dict, window_days: int) -> str:
    """An alert entry expires a telemetry window after its last alert."""
    if not entry.get("expires_at"):
        return "(held by the list)"
    expires = datetime.fromisoformat(entry["expires_at"].replace("Z", "+00:00"))
    return iso_utc(expires - timedelta(days=window_days))


def fleet_line(entry: dict) -> str:
    """One entry of the fleet's list with the operators' evidence (server/fleet/sql.py)."""
    sids = ", ".join(str(sid) for sid in entry["signatures"][:10])
    return (f"  {entry['address']}: reported by {entry['routers']} routers of "
            f"{entry['networks']} networks, {entry['alerts']} alerts (sids {sids}), "
            f"{entry['first_seen']} to {entry['last_seen']}; blocked until "
            f"{entry['expires_at']}; by {reporters_text(entry)}")


def summary(ids_gz: bytes, firewall_gz: bytes, fleet: list[dict] = ()) -> str:
    """--explain --summary: how many rules for each reason, of which classtypes, and the
    entries by reason, in a dozen lines instead of one a rule."""
    ids = orjson.loads(gzip.decompress(ids_gz))
    firewall = orjson.loads(gzip.decompress(firewall_gz))
    reasons = Counter(entry["reason"] for entry in ids["rules"])
    classtypes = Counter(entry["classtype"] or "(none)" for entry in ids["rules"])
    entry_reasons = Counter(reason for entry in firewall["entries"]
                            for reason in entry.get("reasons", []))
    lines = [f"IDS rules ({ids['rule_count']}, ruleset {ids['version']}) by reason: "
             + ", ".join(f"{reason} {count}" for reason, count in reasons.most_common()),
             "  by classtype: " + ", ".join(f"{name} {count}"
                                            for name, count in classtypes.most_common(8)),
             f"Firewall entries ({firewall['entry_count']}"
             f"{', truncated' if firewall['truncated'] else ''}) by reason: "
             + (", ".join(f"{reason} {count}" for reason, count in entry_reasons.most_common())
                or "none"),
             f"Fleet entries: {len(fleet)}",
             "(rulegen --explain without --summary: one line a rule)"]
    return "\n".join(lines)


def explain(ids_gz: bytes, firewall_gz: bytes, version_dir: Path, window_days: int,
            fleet: list[dict] = ()) -> str:
    ids = orjson.loads(gzip.decompress(ids_gz))
    firewall = orjson.loads(gzip.decompress(firewall_gz))
    published = published_rules(version_dir)
    newest = newest_update(sorted((version_dir / "rules").rglob("*.rules")))
    lines = [f"IDS rules ({ids['rule_count']}, ruleset {ids['version']}):"]
    lines += [_rule_line(entry, published, newest, window_days) for entry in ids["rules"]]
    lines.append(f"Firewall entries ({firewall['entry_count']}"
                 f"{', truncated' if firewall['truncated'] else ''}):")
    lines += [_firewall_line(entry, window_days) for entry in firewall["entries"]]
    lines.append(f"Fleet entries ({len(fleet)}, the shared list GET /rules/fleet serves it):")
    lines += [fleet_line(entry) for entry in fleet]
    return "\n".join(lines)
