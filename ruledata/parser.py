"""Parse Suricata/Snort-style rule files into plain records.

What it does: reads every rule line, enabled or commented out (`#alert ...` is a disabled
rule), joins multi-line rules (a trailing backslash continues the rule on the next line), splits
the header (action, protocol, addresses, ports, direction) and the options, and keeps the
options the service needs. What it does not do: check that a rule is valid for Suricata (the
engine that loads it does that), expand variables such as `$HOME_NET`, or read every option
(unknown options stay in the raw text). Lines that are not rules (comments, blank lines,
garbage) are counted as skipped, never fatal.

A rule record is a dict with these keys:

- `gid`, `sid`, `rev` (int): identity and revision; `gid` defaults to 1, `rev` to 0.
- `action` (str): alert, drop, pass, reject, rejectsrc, rejectdst, rejectboth, sdrop, log.
- `enabled` (bool): False when the rule was commented out.
- `proto` (str): the header protocol (`tcp`, `udp`, `ip`, or an app-layer name like `http`).
- `src_addr`, `src_port`, `direction`, `dst_addr`, `dst_port` (str): header fields as written.
- `msg` (str), `classtype` (str | None), `priority` (int | None): `priority` is the rule's own
  `priority:` option; the classification's priority is applied by ruledata.weights.
- `metadata` (dict[str, list[str]]): `metadata:` key/value pairs, values in order.
- `references` (list[str]): `reference:` values, e.g. `url,doc.emergingthreats.net/2010371`.
- `flowbits` (dict[str, list[str]]): flowbit names by command (`set`, `setx`, `unset`,
  `toggle`, `isset`, `isnotset`); `noalert` (bool) when the rule never alerts.
- `app_proto` (str | None): the application protocol the rule inspects (from the header or an
  `app-layer-protocol:` option).
- `file` (str): the rule file's name; `raw` (str): the rule text, uncommented.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator

ACTIONS = ("alert", "drop", "pass", "reject", "rejectsrc", "rejectdst", "rejectboth", "sdrop",
           "log")
# Header protocols that are not application layers.
TRANSPORT_PROTOCOLS = frozenset({"ip", "tcp", "udp", "icmp", "icmpv4", "icmpv6", "sctp",
                                 "pkthdr", "ipv4", "ipv6", "ip4", "ip6", "tcp-pkt",
                                 "tcp-stream"})
# Commands that set a bit, and commands that check one (a rule using a check needs a rule that
# sets the bit); `unset` neither sets nor checks.
FLOWBIT_SETS = ("set", "setx", "toggle")
FLOWBIT_CHECKS = ("isset", "isnotset")
FLOWBIT_COMMANDS = FLOWBIT_SETS + ("unset",) + FLOWBIT_CHECKS

_FIELD = r"(\[[^\]]*\]|\S+)"
_RULE = re.compile(
    r"(?P<disabled>#)?[\s#]*"
    r"(?P<action>" + "|".join(ACTIONS) + r")\s+(?P<proto>\S+)\s+"
    + _FIELD + r"\s+" + _FIELD + r"\s+(->|<>|<-)\s+" + _FIELD + r"\s+" + _FIELD +
    r"\s*\((?P<options>.*)\)\s*$")
# name[: value]; — a value runs to the first semicolon not escaped by a backslash.
_OPTION = re.compile(r"\s*([^\s:;]+)\s*(?::([^;\\]*(?:\\.[^;\\]*)*))?;")
_INTEGER_OPTIONS = ("gid", "sid", "rev", "priority")
_KEPT_OPTIONS = frozenset(_INTEGER_OPTIONS + ("msg", "classtype", "metadata", "reference",
                                              "flowbits", "noalert", "app-layer-protocol"))


class RuleParseError(ValueError):
    """A line looks like a rule but cannot be one (e.g. no sid)."""


def parse_rule(line: str, file: str = "") -> dict | None:
    """Parse one (joined) rule line; None when the line is not a rule at all."""
    match = _RULE.match(line)
    if match is None:
        return None
    disabled, action, proto, src, sport, direction, dst, dport, options = match.groups()
    rule = {
        "gid": 1, "sid": None, "rev": 0, "action": action, "enabled": disabled is None,
        "proto": proto, "src_addr": src, "src_port": sport, "direction": direction,
        "dst_addr": dst, "dst_port": dport, "msg": "", "classtype": None, "priority": None,
        "metadata": {}, "references": [], "flowbits": {}, "noalert": False,
        "app_proto": None if proto.lower() in TRANSPORT_PROTOCOLS else proto.lower(),
        "file": file, "raw": line[match.start("action"):].rstrip(),
    }
    for name, value in _OPTION.findall(options):
        if name in _KEPT_OPTIONS:
            _apply_option(rule, name, value.strip())
    if rule["sid"] is None:
        raise RuleParseError("rule has no sid")
    return rule


def _apply_option(rule: dict, name: str, value: str) -> None:
    if name == "msg":
        rule["msg"] = value[1:-1] if value[:1] == '"' and value[-1:] == '"' else value
    elif name in _INTEGER_OPTIONS:
        try:
            rule[name] = int(value)
        except ValueError:
            raise RuleParseError(f"{name} is not an integer: {value!r}") from None
    elif name == "classtype":
        rule["classtype"] = value
    elif name == "metadata":
        metadata = rule["metadata"]
        for pair in value.split(","):
            key, _, item = pair.strip().partition(" ")
            if key:
                metadata.setdefault(key, []).append(item.strip())
    elif name == "reference":
        rule["references"].append(value)
    elif name == "flowbits":
        _apply_flowbits(rule, value)
    elif name == "noalert":
        rule["noalert"] = True
    elif name == "app-layer-protocol":
        rule["app_proto"] = value.lstrip("!").split(",")[0].strip().lower() or None


def _apply_flowbits(rule: dict, value: str) -> None:
    command, _, names = value.partition(",")
    command = command.strip().lower()
    if command == "noalert":
        rule["noalert"] = True
    elif command in FLOWBIT_COMMANDS:
        # `isset,a|b` (either) and `set,a&b` list several bits; a `setx` expiry follows a comma.
        bits = names.split(",")[0] if command == "setx" else names
        for bit in re.split(r"[|&]", bits):
            if bit.strip():
                rule["flowbits"].setdefault(command, []).append(bit.strip())


def joined_lines(lines: Iterable[str]) -> Iterator[str]:
    """Join lines ending in a backslash with the next one, as Suricata's loader does: the
    backslash goes, nothing is added (suricata-update adds a space, which would change a
    content string split across lines)."""
    pending = ""
    for line in lines:
        stripped = line.rstrip("\r\n")
        if stripped.rstrip().endswith("\\"):
            pending += stripped.rstrip()[:-1]
            continue
        yield pending + stripped
        pending = ""
    if pending:
        yield pending


def parse_text(text: str, file: str = "") -> tuple[list[dict], int]:
    """Parse a whole rule file's text; return (rules, skipped line count)."""
    rules, skipped = [], 0
    for line in joined_lines(text.splitlines()):
        first = line.lstrip()[:1]
        if not first:
            continue
        if first == "#" and "(" not in line:  # a plain comment: cheap to rule out
            skipped += 1
            continue
        try:
            rule = parse_rule(line, file)
        except RuleParseError:
            rule = None
        if rule is None:
            skipped += 1
        else:
            rules.append(rule)
    return rules, skipped
