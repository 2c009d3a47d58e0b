"""An owner says "that is not an attack" of one of their routers' alerted or blocked
addresses, a signature, or a threat sighting (issue 83). For that router, at once: the
address on its own allowlist (its firewall payload and threat intelligence document drop it
at its next poll), the signature disabled by an override of its own, the sighting closed.
Undone as it was done; every mark kept with who and when (table `false_positives`).

For the fleet, marks are counted by owners, each for one reporter network (of a router of
theirs that counts for the fleet: aged, keyed, at most a few /48s of one IPv6 allocation),
and an address only when a feed lists it or the router sighted it: a threat feed's value
marked from FALSE_POSITIVE_NETWORKS networks is held for an operator while a feed lists it
(`intel decisions`), as a value seen by too much of the fleet is; a signature so marked is listed
as a candidate to disable (`router-backend feedback`). One owner of many routers, or a
thousand fresh MACs, weigh one network or nothing. A new owner ends the previous owner's
marks (`owner_changed`).

A repeated mark is answered with the one stored (a 409) and changes nothing; a router's marks are
at most FALSE_POSITIVE_MARKS_PER_ROUTER_DAY a day. A mark, its effect and the judgement
are one transaction under the router's lock; a value is judged one transaction at a
time."""

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


def stored_value(kind: str, stored: str) -> tuple[str, str] | None:
    """The threat feeds' value a stored mark names (as `checked` stored it)."""
    if kind == "address":
        return "ip", stored
    if kind == "sighting":
        feed_kind, _, value = stored.partition(":")
        return feed_kind, value
    return None


def _note(note: str | None) -> str | None:
    try:
        return note_text(note)
    except TuningRefused as error:
        raise MarkInvalid(str(error)) from None


async def mark(db: Database, config: FeedbackConfig, user: str, mac_text: str, kind: str,
               value: str, note: str | None) -> tuple[Mark, bool]:
    """The live mark, and whether this call made it (False: it was marked already). The
    mark, its effect and the fleet's judgement are one transaction, under the router's lock
    (its day's count holds against concurrent marks)."""
    mac, _ = await owned_router(db, user, mac_text)
    stored, intel_value = checked(kind, value)
    note = _note(note)
    async with db.transaction() as cur:  # a repeat, or a day's marks used up, does no more
        if (found := await marks_db.live(cur, mac, kind, stored)) is not None:
            return found, False
        await _within_the_day(cur, config, mac, user)
    feed = None
    if kind == "sighting" and intel_value is not None:
        feed = await intel_db.sighting_source(db, mac, intel_value[0], intel_value[1])
        if feed is None:
            raise MarkNotFound(f"router {mac} has no sighting of {value[:80]!r}")
    network = await _counts_for(db, mac, kind, intel_value)
    async with db.transaction() as cur:
        await marks_db.lock_router(cur, mac)
        if await intel_db.owner_in(cur, mac) != user:  # changed (or removed) meanwhile
            raise NotYours(f"no router {mac} of user {user[:64]!r}")
        if (found := await marks_db.live(cur, mac, kind, stored)) is not None:
            return found, False
        await _within_the_day(cur, config, mac, user)
        effect = await _effect(cur, mac, user, kind, stored, intel_value, note)
        made = await marks_db.add(cur, mac, user, kind, stored, feed, network, note, effect)
        if made is None:
            raise MarkNotFound(f"router {mac}'s mark of {value[:80]!r} was not stored")
        if kind == "sighting" and intel_value is not None:
            await intel_db.close_as_false_positive(cur, mac, intel_value[0], intel_value[1],
                                                   closed=True)
        await _judged(cur, config, intel_value)
    return made, True


async def _within_the_day(cur, config: FeedbackConfig, mac: str, user: str) -> None:
    if await marks_db.made_today(cur, mac, user) >= config.per_router_day:
        raise MarksExhausted(f"router {mac} has made its {config.per_router_day} marks of "
                             "the last day", retry_after_seconds=3600)


async def _counts_for(db: Database, mac: str, kind: str,
                      intel_value: tuple[str, str] | None) -> str | None:
    """The reporter network the mark counts for in the fleet (the router's, from its last
    poll), or None when it counts for nothing: an address counts only when a feed lists it
    or the router sighted it (what a router says it alerted on is its own to say), and no
    value is held unless a feed lists it (`_judged`)."""
    address = await last_address(db, mac)
    if address is None:
        return None
    if kind == "address" and intel_value is not None:
        async with db.cursor() as cur:
            listed = await intel_db.listed_now(cur, *intel_value)
        if not listed and await intel_db.sighting_source(db, mac, *intel_value) is None:
            return None
    return network_of(address)


async def unmark(db: Database, config: FeedbackConfig, user: str, mac_text: str,
                 mark_id: int) -> None:
    mac, _ = await owned_router(db, user, mac_text)
    async with db.transaction() as cur:
        await marks_db.lock_router(cur, mac)
        undone = await marks_db.unmark(cur, mac, mark_id, user)
        if undone is None:
            raise MarkNotFound(f"router {mac} has no live mark {mark_id}")
        await _undone(cur, config, mac, user, *undone)


async def owner_changed(db: Database, config: FeedbackConfig, mac: str,
                        user: str | None) -> int:
    """The router's live marks of anyone but its owner now (`user`) ended, their effects
    undone: a new owner neither sees nor inherits the previous owner's marks."""
    async with db.transaction() as cur:
        await marks_db.lock_router(cur, mac)
        ended = await marks_db.end_others(cur, mac, user)
        # Values judged in one order whatever the transaction, so that two never wait on
        # each other's value locks.
        for kind, stored, effect in sorted(ended, key=lambda mark: _lock_order(*mark[:2])):
            await _undone(cur, config, mac, "owner changed", kind, stored, effect)
    return len(ended)


async def rejudged(db: Database, config: FeedbackConfig) -> dict:
    """Every value owners marked or hold judged again: routers removed, aged into the
    fleet's count or re-keyed since move a hold that no mark or unmark moved (the
    `false-positive-holds` job)."""
    values = {intel_value for kind, stored in await marks_db.marked_values(db)
              if (intel_value := stored_value(kind, stored)) is not None}
    values |= {(kind, value) for kind, value, decision, _, _, by, _
               in await intel_db.decisions(db) if by == intel_db.OWNERS}
    for intel_value in sorted(values):
        async with db.transaction() as cur:
            await _judged(cur, config, intel_value)
    return {"values": len(values)}


def _lock_order(kind: str, stored: str) -> str:
    intel_value = stored_value(kind, stored)
    return "" if intel_value is None else f"{intel_value[0]}:{intel_value[1]}"


async def _undone(cur, config: FeedbackConfig, mac: str, by: str, kind: str, stored: str,
                  effect: int | None) -> None:
    intel_value = stored_value(kind, stored)
    if effect is not None:
        if kind == "signature":
            await overrides_db.remove_in(cur, effect, f"owner {by}")
        elif intel_value is None or not await marks_db.hand_over(cur, mac, intel_value[1],
                                                                 effect):
            await allowlist_db.remove_in(cur, effect, f"owner {by}")
    if intel_value is not None:
        await intel_db.close_as_false_positive(cur, mac, intel_value[0], intel_value[1],
                                               closed=False)
    await _judged(cur, config, intel_value)


async def _effect(cur, mac: str, user: str, kind: str, stored: str,
                  intel_value: tuple[str, str] | None, note: str | None) -> int | None:
    """What the mark changes for its router: the allowlist entry or override made (None:
    none new, as when an operator had allowlisted the address already)."""
    why = f"not an attack, says its owner {user}" + (f": {note}" if note else "")
    if kind == "signature":
        override_id, _ = await overrides_db.add_in(cur, "disable", stored, mac, why[:500],
                                                   f"owner {user}")
        return override_id
    if intel_value is not None and intel_value[0] == "ip":
        entry_id, _ = await allowlist_db.add_in(cur, intel_value[1], mac, why[:500],
                                                f"owner {user}")
        return entry_id
    return None


async def _judged(cur, config: FeedbackConfig, intel_value: tuple[str, str] | None) -> None:
    """The fleet's hold on the value, as the marks of its owners' networks now stand, one
    judgement of a value at a time."""
    if intel_value is None:
        return
    kind, value = intel_value
    await marks_db.lock_value(cur, f"{kind}:{value}")
    named = [("sighting", f"{kind}:{value}")] + ([("address", value)] if kind == "ip" else [])
    networks = await marks_db.networks(cur, named, config.min_router_age, config.keyed)
    held = networks >= config.networks and await intel_db.listed_now(cur, kind, value)
    await intel_db.hold_for_owners(cur, kind, value, networks if held else None)


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
