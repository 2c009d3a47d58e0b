"""The threat intelligence document every router gets (GET /rules/intel): pure functions of
the indicators the delivery statement kept (server/intel/sql.py, every rail applied there),
no database, no clock.

The document holds Suricata 7 dataset files, a rules file that loads them (sids of our own,
INTEL_SIDS), and the networks and addresses for the router's firewall block list, as the
fleet's are. Datasets match a buffer exactly: a listed domain alerts on that name in a DNS
query, a TLS SNI or an HTTP host, not on names under it (the hunt finds those). Files are
named relative to the rules file: Suricata opens a relative `load` path, and a
`filesha256` / `filemd5` list, beside the rules file that names it.

A router that holds an earlier document asks for what changed since (`delta_document`): a
feed's daily change of 1 % is a few tens of KB, not the whole document again.

Memory on a router: Suricata's datasets hold about 100-170 bytes an entry (a hash table
entry and the value), so INTEL_MAX_ENTRIES at 100,000 is about 10-17 MB.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
from datetime import datetime, timedelta, timezone

from engine.addresses import is_public_network
from engine.firewall import Exemptions
from engine.fleet import HOUR_FORMAT, entry_key
from engine.places import removed_places

FIRST_SID = 1_990_001  # 1,000,000-1,999,999: for local use; INTEL_SIDS of them ours
INTEL_SIDS = 20
INTEL_SID_RANGE = range(FIRST_SID, FIRST_SID + INTEL_SIDS)
DATASET_MEMCAP = "64mb"

# (file, dataset type or the keyword that loads a hash list, the kinds it holds)
FILES = {
    "rb-intel-domains.lst": ("string", ("domain",)),
    "rb-intel-ip.lst": ("ip", ("ip",)),
    "rb-intel-ja3.lst": ("md5", ("ja3",)),
    "rb-intel-ja4.lst": ("string", ("ja4",)),
    "rb-intel-sha256.txt": ("filesha256", ("sha256",)),
    "rb-intel-md5.txt": ("filemd5", ("md5",)),
}

# (protocol, sticky buffer, file, what it is)
_DATASET_RULES = (
    ("dns", "dns.query", "rb-intel-domains.lst", "DNS query for a listed domain"),
    ("tls", "tls.sni", "rb-intel-domains.lst", "TLS SNI of a listed domain"),
    ("http", "http.host", "rb-intel-domains.lst", "HTTP host of a listed domain"),
    ("ip", "ip.src", "rb-intel-ip.lst", "traffic from a listed address"),
    ("ip", "ip.dst", "rb-intel-ip.lst", "traffic to a listed address"),
    ("tls", "ja3.hash", "rb-intel-ja3.lst", "TLS client of a listed JA3 hash"),
    ("tls", "ja4.hash", "rb-intel-ja4.lst", "TLS client of a listed JA4 fingerprint"),
)
_HASH_RULES = (("rb-intel-sha256.txt", "file of a listed SHA-256"),
               ("rb-intel-md5.txt", "file of a listed MD5"))


def shown(kind: str, value: str) -> str:
    """A stored value as Suricata matches it and people read it: a domain's labels back in
    order (the hunt index and the intel store a domain's labels reversed, so that a name's
    parents are its prefixes). The one place that turns a stored value back."""
    return ".".join(reversed(value.split("."))) if kind == "domain" else value


def _line(file_type: str, kind: str, value: str) -> str:
    text = shown(kind, value)
    if file_type == "string":  # a string dataset's lines are base64
        return base64.b64encode(text.encode("ascii")).decode("ascii")
    return text


# What an analyst reads of an alert (suricata-check's S800-S803), last in each rule (S208).
_METADATA = ("metadata:attack_target Client_Endpoint, created_at 2026_11_27, deployment "
             "Perimeter, performance_impact Low, signature_severity Major;")


def rules_file(present: set[str]) -> str:
    """The rules that load the files `present` (an absent file's rules are left out:
    Suricata refuses a rule whose list is empty or missing)."""
    lines = ["# router-backend threat intelligence (GET /rules/intel): the datasets and lists "
             "beside this file"]
    sid = FIRST_SID
    for protocol, buffer, name, what in _DATASET_RULES:
        if name in present:
            file_type = FILES[name][0]
            set_name = name.rsplit(".", 1)[0]
            lines.append(
                f'alert {protocol} any any -> any any (msg:"RBINTEL INFO {what}"; '
                f"{buffer}; dataset:isset,{set_name},type {file_type},load {name},"
                f"memcap {DATASET_MEMCAP}; classtype:trojan-activity; sid:{sid}; rev:1; "
                f"{_METADATA})")
        sid += 1
    for name, what in _HASH_RULES:
        if name in present:
            lines.append(
                f'alert http any any -> any any (msg:"RBINTEL INFO {what}"; '
                f"{FILES[name][0]}:{name}; classtype:trojan-activity; sid:{sid}; rev:1; "
                f"{_METADATA})")
        sid += 1
    return "\n".join(lines) + "\n"


def rounded_expiry(expires_at: str) -> str:
    """An expiry as the document carries it: rounded up to the next Monday 00:00 UTC, so that
    a feed that sees its values again at every fetch (moving their expiries) does not change
    every block entry at every fetch. The delivery statement drops an expired value at its
    own expiry; the document's is the latest a router may hold it without fetching again."""
    moment = datetime.strptime(expires_at, HOUR_FORMAT).replace(tzinfo=timezone.utc)
    monday = (moment - timedelta(days=moment.weekday())).replace(hour=0, minute=0, second=0)
    if monday < moment:
        monday += timedelta(days=7)
    return monday.strftime(HOUR_FORMAT)


def _blocked(network, expires_at: str) -> dict:
    address = (str(network.network_address) if network.num_addresses == 1
               else str(network))
    return {"address": address, "family": network.version, "reasons": ["intel"],
            "expires_at": expires_at}


def block_entries(listed: list[tuple]) -> list[dict]:
    """(network, expiry) pairs as the block list takes them: overlapping ones merged (an
    nftables interval set refuses overlapping elements, and an address listed twice would be
    two entries a delta cannot tell apart), each merged entry expiring with the last of its
    parts; in the order of their addresses."""
    entries = []
    for family in (4, 6):
        parts = sorted((net, expires) for net, expires in listed if net.version == family)
        merged = list(ipaddress.collapse_addresses(net for net, _ in parts))
        n = 0
        for network in merged:  # both sorted: each part is inside one merged network
            expires = ""
            while n < len(parts) and parts[n][0].subnet_of(network):
                expires = max(expires, parts[n][1])
                n += 1
            entries.append(_blocked(network, rounded_expiry(expires)))
    return entries


def _exempt(entry: dict, exemptions: Exemptions) -> bool:
    """A router's own allowlist (and what is not public, judged again) takes an address or
    a network out when they overlap."""
    if entry["kind"] == "ip":
        return exemptions.exempt(entry["value"])
    if not is_public_network(entry["value"]):  # as the delivery's rail judges it (overlap)
        return True
    network = ipaddress.ip_network(entry["value"], strict=False)
    return any(network.overlaps(allowed) for allowed in exemptions.networks
               if allowed.version == network.version)


def intel_document(entries: list[dict], exemptions: Exemptions = Exemptions(),
                   max_block: int | None = None) -> dict:
    """The document from entries {kind, value (stored), expires_at (written)}, in the
    delivery statement's order; equal inputs give equal bytes. A router's own allowlist
    (`exemptions`) takes its addresses out of its copy; `max_block`: the first addresses and
    networks kept as block entries (a router whose set holds fewer)."""
    files: dict[str, list[str]] = {name: [] for name in FILES}
    kinds = {kind: name for name, (_, held) in FILES.items() for kind in held}
    listed, count = [], 0
    for entry in entries:
        kind = entry["kind"]
        if kind in ("ip", "network") and _exempt(entry, exemptions):
            continue
        count += 1
        if kind in ("ip", "network"):
            listed.append((ipaddress.ip_network(entry["value"]), entry["expires_at"]))
            if kind == "network":
                continue
        name = kinds[kind]
        files[name].append(_line(FILES[name][0], kind, entry["value"]))
    kept = {name: sorted(lines) for name, lines in files.items() if lines}
    block = block_entries(listed[:max_block])
    return {"entry_count": count, "files": {name: "\n".join(lines) + "\n" for name, lines in kept.items()},
            "rules": rules_file(set(kept)), "block": block}


def items(document: dict) -> set[tuple[str, str]]:
    """A document as a set of (place, item): each file's lines, each block entry."""
    held = {(name, line) for name, text in document["files"].items()
            for line in text.splitlines()}
    held |= {("block", entry_key(entry)) for entry in document["block"]}
    return held


def changes(old: dict, new: dict) -> tuple[set, set]:
    """What `new` adds to `old` and removes from it."""
    before, after = items(old), items(new)
    return after - before, before - after


def delta_document(since: str, new: dict, added: set, removed: set,
                   serials: tuple[int, int] | None = None, places: bool = False) -> dict:
    """What a router holding the document `since` (its ETag) applies to hold `new`: each
    file's lines to add and remove, the block entries to add and remove, and the rules file
    whole (a few lines); with `places`, what is removed as its places in the version held
    (engine/places.py); `serials`: the numbers of the version held and of `new`
    (server/polling/versions.py), said so that a router sees a gap."""
    blocks = {entry_key(entry): entry for entry in new["block"]}
    changed: dict[str, dict[str, list[str]]] = {}
    for verb, items_changed in (("add", added), ("remove", removed)):
        for place, item in items_changed:
            changed.setdefault(place, {"add": [], "remove": []})[verb].append(item)
    block = changed.pop("block", {"add": [], "remove": []})
    gone = [item.split(" ", 1)[0] for item in block["remove"]]
    numbered = {} if serials is None else {"from_serial": serials[0], "serial": serials[1]}
    delta = {"delta_from": since, **numbered, "entry_count": new["entry_count"],
             "files": {name: _file_change(new, name, lists, places)
                       for name, lists in changed.items()},
             "rules": new["rules"],
             "block": {"add": sorted((blocks[item] for item in block["add"]),
                                     key=lambda e: (e["family"], e["address"]))}}
    if places:
        kept = [key.split(" ", 1)[0] for key in blocks if ("block", key) not in added]
        delta["block"]["remove_at"] = removed_places(sorted(kept), (), gone)
    else:
        delta["block"]["remove"] = sorted(gone)
    return delta


def _file_change(new: dict, name: str, lists: dict[str, list[str]], places: bool) -> dict:
    """A file's lines to add, and to remove (or their places in the file held)."""
    if not places:
        return {"add": sorted(lists["add"]), "remove": sorted(lists["remove"])}
    return {"add": sorted(lists["add"]), "remove_at": removed_places(
        _lines(new["files"].get(name, "")), lists["add"], lists["remove"])}


@functools.lru_cache(maxsize=4)
def _lines(text: str) -> list[str]:
    """A file's lines (sorted: intel_document writes them so), split once for every delta
    computed to the same document: 100,000 lines took 15 ms a delta (a few MB held for the
    four files asked last)."""
    return text.splitlines()