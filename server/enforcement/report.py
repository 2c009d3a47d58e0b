"""`POST /rules/enforced`: what a router's firewall sets dropped since its last report
(docs/router-api.md "Enforcement reports"). Body:

    {"lists": {"firewall": {"packets": 12, "bytes": 840,
                            "entries": [{"address": "203.0.113.5", "packets": 12, "bytes": 840}]},
               "fleet": {...}, "intel": {..., "alerts": 3},
               "ids": {"fired": 30, "sampled": 2, "flowbits": 0}}}

`firewall` is the router's own block list, `fleet` the fleet's shared one, `intel` the threat
intelligence's block entries (`alerts`: its rules' alerts since the last report), `ids` the
alerts of its IDS payload's rules since the last report by their source (the payload's
`reason`: engine/generate.py RULE_SOURCES), each stored as a list of its own
(`ids.fired`, ...) with alerts and no packets. Each list is optional; `entries` are the
entries that matched, most packets first, at most MAX_ENTRIES a list. Counts are whole
numbers from 0 to 2^63 - 1. A report of another shape is refused whole (400), nothing
stored. An entry whose address is no address or network,
or one named again in its list, is ignored (it cannot be one the router was sent), as an
entry never sent is (server/enforcement/store.py)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.addresses import canonical_network
from engine.generate import RULE_SOURCES
from server.refusal import Refusal

LISTS = ("firewall", "fleet", "intel")
IDS = "ids"  # the IDS rules' alerts, by source: each stored as list "ids.<source>"
MAX_BODY_BYTES = 64 * 1024
MAX_ENTRIES = 100  # a list's entries in one report
MAX_COUNT = 2 ** 63 - 1
_LIST_FIELDS = {"packets", "bytes", "entries", "alerts"}
_ENTRY_FIELDS = {"address", "packets", "bytes"}


class EnforcementInvalid(Refusal):
    """An enforcement report that is not what the API describes."""


@dataclass(frozen=True)
class Hit:
    entry: str | None  # a network as PostgreSQL's cidr takes it (203.0.113.5/32); None:
    #                    not one, or named twice: ignored
    packets: int
    bytes: int


@dataclass(frozen=True)
class ListReport:
    name: str
    packets: int
    bytes: int
    alerts: int
    hits: tuple[Hit, ...]


def parse_report(body: object) -> tuple[ListReport, ...]:
    """The lists of a decoded report body; EnforcementInvalid naming what is wrong."""
    if not isinstance(body, dict) or set(body) != {"lists"}:
        raise EnforcementInvalid('body must be a JSON object {"lists": {...}}')
    lists = body["lists"]
    if not isinstance(lists, dict):
        raise EnforcementInvalid("lists: expected an object")
    if unknown := set(lists) - {*LISTS, IDS}:
        raise EnforcementInvalid(f"lists: unknown lists {', '.join(sorted(unknown))[:200]}; "
                                 f"known: {', '.join((*LISTS, IDS))}")
    blocked = tuple(_list(name, lists[name]) for name in LISTS if name in lists)
    return blocked + (_ids(lists[IDS]) if IDS in lists else ())


def _ids(given: object) -> tuple[ListReport, ...]:
    """The IDS rules' alerts by source, one list each."""
    if not isinstance(given, dict):
        raise EnforcementInvalid(f"lists.{IDS}: expected an object of sources and alerts")
    if unknown := set(given) - set(RULE_SOURCES):
        raise EnforcementInvalid(f"lists.{IDS}: unknown sources "
                                 f"{', '.join(sorted(unknown))[:200]}; known: "
                                 f"{', '.join(RULE_SOURCES)}")
    return tuple(ListReport(f"{IDS}.{source}", 0, 0, _count(given, source, f"lists.{IDS}"), ())
                 for source in RULE_SOURCES if source in given)


def _list(name: str, given: object) -> ListReport:
    if not isinstance(given, dict):
        raise EnforcementInvalid(f"lists.{name}: expected an object")
    if unknown := set(given) - _LIST_FIELDS:
        raise EnforcementInvalid(f"lists.{name}: unknown fields "
                                 f"{', '.join(sorted(unknown))[:200]}")
    if "alerts" in given and name != "intel":
        raise EnforcementInvalid(f"lists.{name}.alerts: only the intel list has alerts")
    packets = _count(given, "packets", f"lists.{name}")
    bytes_ = _count(given, "bytes", f"lists.{name}")
    entries = given.get("entries", [])
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        raise EnforcementInvalid(f"lists.{name}.entries: expected a list of at most "
                                 f"{MAX_ENTRIES} entries")
    hits, named = [], set()
    for n, entry in enumerate(entries):
        hit = _hit(f"lists.{name}.entries[{n}]", entry)
        if hit.entry in named:
            hit = Hit(None, hit.packets, hit.bytes)
        named.add(hit.entry)
        hits.append(hit)
    alerts = _count(given, "alerts", f"lists.{name}") if "alerts" in given else 0
    return ListReport(name, packets, bytes_, alerts, tuple(hits))


def _hit(place: str, given: object) -> Hit:
    if not isinstance(given, dict) or set(given) != _ENTRY_FIELDS:
        raise EnforcementInvalid(f'{place}: expected {{"address", "packets", "bytes"}}')
    address = given["address"]
    if not isinstance(address, str) or len(address) > 64:
        raise EnforcementInvalid(f"{place}.address: expected a string of at most 64 characters")
    try:
        entry: str | None = str(canonical_network(address))
    except ValueError:
        entry = None
    return Hit(entry, _count(given, "packets", place), _count(given, "bytes", place))


def _count(given: dict, field: str, place: str) -> int:
    value = given.get(field)
    if type(value) is float and value.is_integer() and 0 <= value < 2 ** 63:
        value = int(value)  # JSON has one number type: 5.0 is 5
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise EnforcementInvalid(f"{place}.{field}: expected a whole number from 0 to 2^63 - 1")
    return value
