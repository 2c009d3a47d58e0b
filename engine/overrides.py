"""Operators' rule overrides applied to one router's generation (pure, like the rest of the
engine).

An override is (id, action, selector, for this router only). For each rule the last that
matches wins, in this order: fleet-wide enables, fleet-wide disables, the router's enables,
the router's disables; so a router's own override beats the fleet's, and at one level a
disable beats an enable. A disabled rule is never in the payload, not even as a flowbit
setter; an enabled one is always in (before the rules that fired), within the budget, with
its setters, even when the ruleset ships it commented out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.ruleset import Ruleset
from engine.selectors import Selector, matching

# One override as the summary carries it: (id, action, selector, for this router only).
OverrideRow = tuple[int, str, str, bool]

_MATCHES: dict[tuple[str, str], list[int]] = {}  # (ruleset directory, selector) -> indices
_MAX_CACHED = 1000


@dataclass
class Resolved:
    disabled: set[int] = field(default_factory=set)          # id(rule)
    forced: list[tuple[dict, int]] = field(default_factory=list)  # (rule, override id)


def resolve(ruleset: Ruleset, overrides: list[OverrideRow]) -> Resolved:
    decisions: dict[int, tuple[str, int]] = {}  # index in all_rules -> (action, override id)
    order = sorted(overrides, key=lambda o: (o[3], o[1] == "disable", o[0]))
    for override_id, action, text, _ in order:
        for index in _matches(ruleset, text):
            decisions[index] = (action, override_id)
    resolved = Resolved()
    for index, (action, override_id) in sorted(decisions.items()):
        rule = ruleset.all_rules[index]
        if action == "disable":
            resolved.disabled.add(id(rule))
        else:
            resolved.forced.append((rule, override_id))
    return resolved


def _matches(ruleset: Ruleset, text: str) -> list[int]:
    key = (str(ruleset.directory), text)  # each publication has a directory of its own
    if key not in _MATCHES:
        if len(_MATCHES) >= _MAX_CACHED:
            _MATCHES.clear()
        try:
            _MATCHES[key] = matching(ruleset.all_rules, Selector.parse(text))
        except ValueError:  # stored before a parser change: matches nothing
            _MATCHES[key] = []
    return _MATCHES[key]
