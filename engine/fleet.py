"""What the fleet sees together: the external addresses that alerted at enough routers (the
fleet's attackers, blocked by every router) and the signatures that fired at enough routers
(outbreaks, kept in every router's IDS payload). Pure functions of what the server's query
counted (server/fleet/sql.py); no database, no clock.

Poisoning is resisted by counting networks, not routers: each alert counts for the network
its upload came from (an IPv4 /24, an IPv6 /48, at most a few per IPv6 /32:
engine/addresses.py), each router for one network per address, so many routers behind one
network count as one toward the threshold. Which routers may report at all (keyed ones in
key mode, none younger than the set age by registration or key) is decided by the query,
which also counts and applies every rail before its limit. The rails of a router's own
block list hold for the fleet's (engine/firewall.py), judged again here: never an address
that is not public, never one on the fleet's allowlist, never one a router of the fleet
polls from, never the service's own.

The routers' document names what a router blocks and until when, nothing that changes
while an attack goes on (counts, reporters, last seen are for operators): its ETag moves
when an address joins or leaves the list, or when an expiry moves to its next
EXPIRY_STEP_HOURS boundary, so every router re-fetches it a few times a day at most.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from engine.addresses import is_public
from engine.firewall import Exemptions
from engine.places import removed_places

HOUR_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
EXPIRY_STEP_HOURS = 6
TIMES = ("first_seen", "last_seen", "expires_at")  # an entry's times (an outbreak: two)


def times_written(entry: dict) -> dict:
    """An entry as the database reads it (its times datetimes), its times written as the
    lists carry them (HOUR_FORMAT, UTC): what the rails below take, what the job stores as
    JSON, the routers' document and what operators see."""
    return {**entry, **{name: _written(entry[name]) for name in TIMES if name in entry}}


def _written(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(timezone.utc).strftime(HOUR_FORMAT)


def expires_at(last_hour: str, window_hours: int) -> str:
    """The end of the last hour reported, plus the window, rounded up to the next
    EXPIRY_STEP_HOURS boundary (UTC): a running attack moves it four times a day, not
    hourly."""
    moment = datetime.strptime(last_hour, HOUR_FORMAT).replace(tzinfo=timezone.utc) \
        + timedelta(hours=1 + window_hours)
    step = EXPIRY_STEP_HOURS * 3600
    rounded = math.ceil(moment.timestamp() / step) * step
    return datetime.fromtimestamp(rounded, timezone.utc).strftime(HOUR_FORMAT)


def fleet_attackers(found: list[dict], exemptions: Exemptions, max_entries: int,
                    window_hours: int) -> list[dict]:
    """The fleet's attackers among the addresses the query found at enough networks (each a
    dict: address, routers, networks, alerts, severity, signatures, first_seen, last_seen,
    reporters): the rails applied, most networks (then routers) first, at most
    `max_entries`, each with its expiry."""
    kept = [entry for entry in found
            if is_public(entry["address"]) and not exemptions.exempt(entry["address"])]
    kept.sort(key=lambda entry: (-entry["networks"], -entry["routers"], entry["address"]))
    return [{**entry, "expires_at": expires_at(entry["last_seen"], window_hours)}
            for entry in kept[:max_entries]]


def fleet_outbreaks(found: list[dict], max_entries: int) -> list[dict]:
    """The signatures the query found firing at enough networks, most networks first."""
    return sorted(found, key=lambda entry: (-entry["networks"], -entry["routers"],
                                            entry["sid"]))[:max_entries]


def router_entries(attackers: list[dict], exemptions: Exemptions = Exemptions(),
                   max_entries: int | None = None) -> list[dict]:
    """The fleet's entries as a router gets them (GET /rules/fleet): what its block list
    needs, minus what `exemptions` holds (a router's own allowlist), the first `max_entries`
    of `attackers` left (the stored order: matched at the most networks on the routers'
    firewalls, then most networks reporting it, then routers, then the most recently seen
    day, then the address), in the order of their addresses (not of their counts, which move
    while an attack goes on)."""
    kept = [entry for entry in attackers if not exemptions.exempt(entry["address"])]
    entries = [{"address": entry["address"], "family": 6 if ":" in entry["address"] else 4,
                "reasons": ["fleet"], "expires_at": entry["expires_at"]}
               for entry in kept[:max_entries]]
    return sorted(entries, key=lambda entry: (entry["family"], entry["address"]))


def fleet_document(attackers: list[dict], exemptions: Exemptions = Exemptions(),
                   max_entries: int | None = None) -> dict:
    """The shared document: no time of its own, so equal inputs give equal bytes and its ETag
    moves only when what a router blocks (or until when) changes."""
    entries = router_entries(attackers, exemptions, max_entries)
    return {"entry_count": len(entries), "entries": entries}


def fleet_items(document: dict) -> set[tuple[str, str]]:
    """The document as the versions' items (server/polling/versions.py): each entry, its
    address and expiry (an entry whose expiry moved is removed and added again)."""
    return {("entry", entry_key(entry)) for entry in document["entries"]}


def entry_key(entry: dict) -> str:
    """A block entry as a versions' item: its address and expiry (the intelligence's block
    entries too, engine/intel.py)."""
    return f"{entry['address']} {entry['expires_at']}"


def fleet_delta(since: str, new: dict, added: set, removed: set,
                serials: tuple[int, int], places: bool = False) -> dict:
    """What a router holding the list `since` (its ETag) applies to hold `new`: the entries
    to remove (their addresses, or with `places` their places in the list held:
    engine/places.py) and to add; `serials`: the numbers of the version held and of `new`,
    said so that a router sees a gap."""
    entries = {entry_key(entry): entry for entry in new["entries"]}
    gone = [item.split(" ", 1)[0] for _, item in removed]
    delta = {"delta_from": since, "from_serial": serials[0], "serial": serials[1],
             "entry_count": new["entry_count"],
             "add": sorted((entries[item] for _, item in added),
                           key=lambda entry: (entry["family"], entry["address"]))}
    if places:
        kept = [key.split(" ", 1)[0] for key in entries if ("entry", key) not in added]
        delta["remove_at"] = removed_places(sorted(kept), (), gone)
    else:
        delta["remove"] = sorted(gone)
    return delta
