"""`POST /rules/enforced`: what a router's firewall sets dropped since its last report
(docs/router-api.md "Enforcement reports"). Body:

    {"lists": {"firewall": {"packets": 12, "bytes": 840,
                            "entries": [{"address": "203.0.113.5", "packets": 12, "bytes": 840}]},
               "fleet": {...}, "intel": {..., "alerts": 3}}}

`firewall` is the router's own block list, `fleet` the fleet's shared one, `intel` the threat
intelligence's block entries (`alerts`: its rules' alerts since the last report). Each list
is optional; `entries` are the entries that matched, most packets first, at most
MAX_ENTRIES a list. Counts are whole numbers from 0 to 2^63 - 1; an entry's packets and
bytes never sum past its list's. Anything else is refused whole (400), nothing stored."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from engine.addresses import canonical_network
from server.refusal import Refusal

LISTS = ("firewall", "fleet", "intel")
MAX_BODY_BYTES = 64 * 1024
MAX_ENTRIES = 100  # a list's entries in one report
MAX_COUNT = 2 ** 63 - 1
_LIST_FIELDS = {"packets", "bytes", "entries", "alerts"}
_ENTRY_FIELDS = {"address", "packets", "bytes"}


class EnforcementInvalid(Refusal):
    """An enforcement report that is not what the API describes."""


@dataclass(frozen=True)
class Hit:
    entry: str  # a network as PostgreSQL's cidr takes it: 203.0.113.5/32
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
    if unknown := set(lists) - set(LISTS):
        raise EnforcementInvalid(f"lists: unknown lists {', '.join(sorted(unknown))[:200]}; "
                                 f"known: {', '.join(LISTS)}")
    return tuple(_list(name, lists[name]) for name in LISTS if name in lists)


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
    hits = tuple(_hit(f"lists.{name}.entries[{n}]", entry) for n, entry in enumerate(entries))
    if len({hit.entry for hit in hits}) < len(hits):
        raise EnforcementInvalid(f"lists.{name}.entries: an entry is named twice")
    if sum(hit.packets for hit in hits) > packets or sum(hit.bytes for hit in hits) > bytes_:
        raise EnforcementInvalid(f"lists.{name}: its entries count more than the list")
    alerts = _count(given, "alerts", f"lists.{name}") if "alerts" in given else 0
    return ListReport(name, packets, bytes_, alerts, hits)


def _hit(place: str, given: object) -> Hit:
    if not isinstance(given, dict) or set(given) != _ENTRY_FIELDS:
        raise EnforcementInvalid(f'{place}: expected {{"address", "packets", "bytes"}}')
    address = given["address"]
    try:
        if not isinstance(address, str) or len(address) > 64:
            raise ValueError
        ipaddress.ip_network(address)  # strict: a network named by its first address
        network = canonical_network(address)
    except ValueError:
        raise EnforcementInvalid(f"{place}.address: not an address or a network "
                                 "(named by its first address)") from None
    return Hit(str(network), _count(given, "packets", place), _count(given, "bytes", place))


def _count(given: dict, field: str, place: str) -> int:
    value = given.get(field)
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise EnforcementInvalid(f"{place}.{field}: expected a whole number from 0 to 2^63 - 1")
    return value
