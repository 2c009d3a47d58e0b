"""Each change an operator can make, checked before anything is stored. A refusal is
`TuningRefused` with the one line to show; nothing was changed then."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from engine.addresses import canonical_network
from engine.ruleset import load_ruleset
from engine.selectors import Selector, matching
from ruledata.workspace import Workspace
from server.tuning import allowlist_sql as allowlist_db
from server.tuning import override_sql as overrides_db
from server.routers import key_sql as keys_db
from server.routers import sql as router_db
from server.db.pool import Database
from server.routers.mac import InvalidMac, normalise_mac
from server.settings import Settings
from server.text import is_plain_text

ACTIONS = ("disable", "enable")
MAX_NOTE = 500


class TuningRefused(Exception):
    """The change cannot be made as asked; the message says why."""


class BadInput(TuningRefused):
    """What was given is not a MAC, an address, a network or a selector: the operator's to
    fix (a command exits 2, as for any bad argument)."""


@dataclass(frozen=True)
class OverrideAdded:
    id: int
    action: str
    selector: str
    mac: str | None
    rules_matched: int
    ruleset_version: str
    routers_due: int


def router_mac(text: str) -> str:
    try:
        return normalise_mac(text)
    except InvalidMac as error:
        raise BadInput(str(error)) from None


async def registered_router(db: Database, text: str | None) -> str | None:
    """An optional MAC naming a registered router (None or empty: the whole fleet)."""
    if not text:
        return None
    mac = router_mac(text)
    if not await router_db.is_registered(db, mac):
        raise TuningRefused(f"{mac} is not registered")
    return mac


def note_text(text: str | None) -> str | None:
    """A note kept with a change: plain text of at most MAX_NOTE characters, or None."""
    text = (text or "").strip()
    if len(text) > MAX_NOTE or not is_plain_text(text):
        raise TuningRefused(f"a note is plain text of at most {MAX_NOTE} characters (no "
                            "control characters)")
    return text or None


def matched_rules(settings: Settings, selector: Selector) -> tuple[str, int]:
    """(version of the ruleset in use, how many of its rules the selector matches). Loads the
    published ruleset: a second or so of CPU, run off the event loop by `add_override`."""
    version_dir = Workspace(settings.rule_data_path).current_version_dir()
    if version_dir is None:
        raise TuningRefused("no ruleset published yet: a selector cannot be checked "
                            "(run rulepreprocess)")
    ruleset = load_ruleset(version_dir)
    return ruleset.version, len(matching(ruleset.all_rules, selector))


async def add_override(db: Database, settings: Settings, action: str, selector_text: str,
                       mac_text: str | None, note: str | None, made_by: str) -> OverrideAdded:
    """Keep matching rules off (`disable`) or always on (`enable`) the payloads of the fleet
    or of one router; refused when the selector matches no rule of the ruleset in use."""
    if action not in ACTIONS:
        raise TuningRefused(f"an override is one of {', '.join(ACTIONS)}, not {action!r}")
    if not is_plain_text(selector_text):
        raise BadInput("a selector is plain text (no control characters)")
    try:
        selector = Selector.parse(selector_text)
    except ValueError as error:  # malformed: a bad argument, as argparse's (exit 2)
        raise BadInput(str(error)) from None
    mac = await registered_router(db, mac_text)
    note = note_text(note)
    version, count = await asyncio.to_thread(matched_rules, settings, selector)
    if count == 0:
        raise TuningRefused(f"{selector.text} matches no rule of ruleset {version}; "
                            "nothing stored")
    override_id, due = await overrides_db.add(db, action, selector.text, mac, note, made_by)
    return OverrideAdded(override_id, action, selector.text, mac, count, version, due)


async def remove_override(db: Database, override_id: int, made_by: str) -> int:
    """Routers made due for generation by the removal."""
    due = await overrides_db.remove(db, override_id, made_by)
    if due is None:
        raise TuningRefused(f"no override {override_id}")
    return due


def network(text: str) -> str:
    try:
        return str(canonical_network(text.strip()))
    except ValueError:
        raise BadInput(f"not an address or network: {text[:64]!r}") from None


async def add_allowed(db: Database, network_text: str, mac_text: str | None,
                      note: str | None, made_by: str) -> tuple[int | None, str, str | None, int]:
    """Never block a network on the fleet's (or one router's) firewall payloads:
    (the entry's id, or None when it was listed already; the network; the MAC; routers
    made due)."""
    allowed = network(network_text)
    mac = await registered_router(db, mac_text)
    entry_id, due = await allowlist_db.add(db, allowed, mac, note_text(note), made_by)
    return entry_id, allowed, mac, due


async def remove_allowed(db: Database, entry_id: int, made_by: str) -> None:
    if not await allowlist_db.remove(db, entry_id, made_by):
        raise TuningRefused(f"no allowlist entry {entry_id}")


async def reset_enrollment(db: Database, mac_text: str, window_minutes: int,
                           made_by: str) -> bool:
    """Revoke the router's key so that it may enroll again within `window_minutes`, and only
    then (a factory-reset router); True when a key was revoked."""
    mac = router_mac(mac_text)
    revoked, registered = await keys_db.reset(db, mac, timedelta(minutes=window_minutes),
                                              made_by)
    if not registered:
        raise TuningRefused(f"{mac} is not registered")
    return revoked
