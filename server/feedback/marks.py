"""An owner says "that is not an attack" of one of their routers' alerted or blocked
addresses, a signature, or a threat sighting (issue 83). For that router, at once: the
address on its own allowlist (its firewall payload and threat intelligence document drop it
at its next poll), the signature disabled by an override of its own, the sighting closed.
Undone as it was done; every mark kept with who and when (table `false_positives`).

For the fleet, marks are counted by the reporter networks of the routers that made them, as
the fleet counts its reporters (aged, keyed, at most a few /48s of one IPv6 allocation):
a threat feed's value marked from FALSE_POSITIVE_NETWORKS networks is held for an operator
(`intel decisions`), as a value seen by too much of the fleet is; a signature so marked is
listed as a candidate to disable (`router-backend feedback`). One owner of many routers, or
a thousand fresh MACs, weigh what their networks weigh.

A repeated mark is answered with the one stored and changes nothing; a router's marks are
at most FALSE_POSITIVE_MARKS_PER_ROUTER_DAY a day, counted before any work."""

from __future__ import annotations

import re
from datetime import datetime

from engine.addresses import canonical_text, network_of
from server.db.pool import Database
from server.feedback import sql as marks_db
from server.feedback.config import FeedbackConfig
from server.feedback.sql import Mark
from server.intel import sql as intel_db
from server.intel.values import ValueInvalid, written_value
from server.refusal import Refusal
from server.routers.mac import InvalidMac, normalise_mac
from server.routers.sql import last_address
from server.tuning import allowlist_sql as allowlist_db
from server.tuning import override_sql as overrides_db
from server.tuning.changes import TuningRefused, note_text

KINDS = ("address", "signature", "sighting")
MAX_VALUE = 300
_SID = re.compile(r"[0-9]{1,10}")


class NotYours(Refusal):
    """The router is not the user's (or not registered at all: the same answer)."""


class MarkInvalid(Refusal):
    """A mark of no kind known, or a value that is not one of its kind."""


class MarkNotFound(Refusal):
    """No such live mark, or no such sighting, of that router."""


class MarksExhausted(Refusal):
    """The router's marks of the day are used up."""


async def owned_router(db: Database, user: str, mac_text: str) -> tuple[str, datetime | None]:
    """The router's MAC, normalised, and since when it is `user`'s (None: always), when it
    is theirs; NotYours otherwise."""
    try:
        mac = normalise_mac(mac_text)
    except InvalidMac:
        raise NotYours(f"no router {mac_text[:40]!r} of user {user[:64]!r}") from None
    registered, owner, since = await intel_db.owner_of(db, mac)
    if not registered or owner != user:
        raise NotYours(f"no router {mac} of user {user[:64]!r}")
    return mac, since


def checked(kind: str, value: str) -> tuple[str, tuple[str, str] | None]:
    """The mark's stored value, and the threat feeds' value it names (kind, stored) if any."""
    if kind not in KINDS:
        raise MarkInvalid(f"a mark is of an {', a '.join(KINDS)}, not {kind[:40]!r}")
    if not isinstance(value, str) or not value or len(value) > MAX_VALUE:
        raise MarkInvalid(f"a value is a string of 1 to {MAX_VALUE} characters")
    if kind == "signature":
        if not _SID.fullmatch(value) or not 0 < int(value) < 2**32:
            raise MarkInvalid(f"a signature is its sid, a number, not {value[:40]!r}")
        return str(int(value)), None
    if kind == "address":
        try:
            address = canonical_text(value)
        except ValueError:
            raise MarkInvalid(f"not an address: {value[:60]!r}") from None
        return address, ("ip", address)
    try:
        indicator = written_value(value)
    except ValueInvalid as error:
        raise MarkInvalid(str(error)) from None
    return f"{indicator[0]}:{indicator[1]}", indicator


def _note(note: str | None) -> str | None:
    try:
        return note_text(note)
    except TuningRefused as error:
        raise MarkInvalid(str(error)) from None


async def mark(db: Database, config: FeedbackConfig, user: str, mac_text: str, kind: str,
               value: str, note: str | None) -> tuple[Mark, bool]:
    """The live mark, and whether this call made it (False: it was marked already)."""
    mac, _ = await owned_router(db, user, mac_text)
    stored, intel_value = checked(kind, value)
    note = _note(note)
    if (found := await marks_db.live(db, mac, kind, stored)) is not None:
        return found, False
    if await marks_db.made_today(db, mac) >= config.per_router_day:
        raise MarksExhausted(f"router {mac} has made its {config.per_router_day} marks of "
                             "the last day", retry_after_seconds=3600)
    feed = None
    if kind == "sighting" and intel_value is not None:
        feed = await intel_db.sighting_source(db, mac, intel_value[0], intel_value[1])
        if feed is None:
            raise MarkNotFound(f"router {mac} has no sighting of {value[:80]!r}")
    address = await last_address(db, mac)
    effect = await _effect(mac, user, kind, stored, intel_value, note, db)
    async with db.transaction() as cur:
        made = await marks_db.add(cur, mac, user, kind, stored, feed,
                                  address and network_of(address), note, effect)
        if made is not None and kind == "sighting" and intel_value is not None:
            await intel_db.close_as_false_positive(cur, mac, intel_value[0], intel_value[1],
                                                   closed=True)
        if made is not None:
            await _judged(cur, config, intel_value)
    if made is None:  # marked meanwhile by another request: that one's effect stands
        await _undo(kind, effect, user, db)
        found = await marks_db.live(db, mac, kind, stored)
        if found is None:  # and undone meanwhile too
            raise MarkNotFound(f"router {mac}'s mark of {value[:80]!r} was undone meanwhile")
        return found, False
    return made, True


async def unmark(db: Database, config: FeedbackConfig, user: str, mac_text: str,
                 mark_id: int) -> None:
    mac, _ = await owned_router(db, user, mac_text)
    async with db.transaction() as cur:
        undone = await marks_db.unmark(cur, mac, mark_id, user)
        if undone is None:
            raise MarkNotFound(f"router {mac} has no live mark {mark_id}")
        kind, stored, effect = undone
        intel_value = checked(kind, stored)[1]
        if kind == "sighting" and intel_value is not None:
            await intel_db.close_as_false_positive(cur, mac, intel_value[0], intel_value[1],
                                                   closed=False)
        await _judged(cur, config, intel_value)
    await _undo(kind, effect, user, db)


async def _effect(mac: str, user: str, kind: str, stored: str,
                  intel_value: tuple[str, str] | None, note: str | None,
                  db: Database) -> int | None:
    """What the mark changes for its router: the allowlist entry or override made (None:
    none new, as when an operator had allowlisted the address already)."""
    why = f"not an attack, says its owner {user}" + (f": {note}" if note else "")
    if kind == "signature":
        override_id, _ = await overrides_db.add(db, "disable", stored, mac, why[:500],
                                                f"owner {user}")
        return override_id
    if intel_value is not None and intel_value[0] == "ip":
        entry_id, _ = await allowlist_db.add(db, intel_value[1], mac, why[:500],
                                             f"owner {user}")
        return entry_id
    return None


async def _undo(kind: str, effect: int | None, user: str, db: Database) -> None:
    if effect is None:
        return
    if kind == "signature":
        await overrides_db.remove(db, effect, f"owner {user}")
    else:
        await allowlist_db.remove(db, effect, f"owner {user}")


async def _judged(cur, config: FeedbackConfig, intel_value: tuple[str, str] | None) -> None:
    """The fleet's hold on the value, as the marks of its networks now stand."""
    if intel_value is None:
        return
    kind, value = intel_value
    named = [("sighting", f"{kind}:{value}")] + ([("address", value)] if kind == "ip" else [])
    networks = await marks_db.networks(cur, named, config.min_router_age, config.keyed)
    await intel_db.hold_for_owners(cur, kind, value,
                                   networks if networks >= config.networks else None)


async def fleet_view(db: Database, config: FeedbackConfig, listed: int = 20) -> dict:
    """What owners marked, as the fleet counts it: the signatures most marked with their
    networks (a candidate to disable fleet-wide at `config.networks`), the values held by
    owners' marks, each feed's sightings and marks."""
    signatures = []
    async with db.transaction() as cur:
        for sid, count in await marks_db.signatures(db, listed):
            networks = await marks_db.networks(cur, [("signature", sid)],
                                               config.min_router_age, config.keyed)
            signatures.append({"sid": int(sid), "marks": count, "networks": networks,
                               "candidate": networks >= config.networks})
    held = [{"kind": kind, "value": value, "note": note, "at": at}
            for kind, value, decision, _, note, by, at in await intel_db.decisions(db)
            if decision == "held" and by == intel_db.OWNERS]
    return {"signatures": signatures, "held": held,
            "feeds": {"sightings": await intel_db.sightings_by_feed(db),
                      "marked": await marks_db.by_feed(db)}}
