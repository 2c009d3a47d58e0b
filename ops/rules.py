"""`router-backend rules disable|enable SELECTOR [--mac MAC] [--note TEXT] | overrides |
remove ID`: keep rules off the fleet's (or one router's) IDS payloads, or always on them,
across every new ruleset. Selectors as in suricata-update: SID, GID:SID, re:REGEX,
group:FILE, classtype:NAME (engine/selectors.py). A selector is checked against the ruleset
in use: one that matches no rule is refused, not stored. The routers concerned are due for
generation at once, so they get the change within one queue poll."""

from __future__ import annotations

import argparse

from engine.ruleset import load_ruleset
from engine.selectors import Selector, matching
from ops.command import CommandError, registered_router, run_command
from ruledata.workspace import Workspace
from server.db import overrides as overrides_db
from server.db.pool import Database
from server.settings import Settings
from server.timestamps import iso_utc

PROG = "router-backend rules"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    for action, help_text in (("disable", "keep matching rules off the payloads"),
                              ("enable", "always put matching rules on the payloads (within "
                                         "the budget, with their flowbit setters)")):
        command = actions.add_parser(action, help=help_text)
        command.add_argument("selector", help="SID, GID:SID, re:REGEX, group:FILE or "
                                              "classtype:NAME")
        command.add_argument("--mac", help="for this router only (default: the whole fleet)")
        command.add_argument("--note", help="free text kept with the override")
    actions.add_parser("overrides", help="every override")
    remove = actions.add_parser("remove", help="remove an override by the id `overrides` shows")
    remove.add_argument("id", type=int)


def matched_rules(settings: Settings, selector: Selector) -> tuple[str, int]:
    """(version of the ruleset in use, how many of its rules the selector matches)."""
    version_dir = Workspace(settings.rule_data_path).current_version_dir()
    if version_dir is None:
        raise CommandError("no ruleset published yet: a selector cannot be checked "
                           "(run rulepreprocess)")
    ruleset = load_ruleset(version_dir)
    return ruleset.version, len(matching(ruleset.all_rules, selector))


async def _add(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    try:
        selector = Selector.parse(args.selector)
    except ValueError as error:
        raise CommandError(str(error)) from None
    mac = await registered_router(db, args.mac)
    version, count = matched_rules(settings, selector)
    if count == 0:
        raise CommandError(f"{selector.text} matches no rule of ruleset {version}; "
                           "nothing stored")
    override_id, due = await overrides_db.add(db, args.action, selector.text, mac, args.note)
    print(f"override {override_id}: {args.action} {selector.text} ({count} rules of ruleset "
          f"{version}) for {mac or 'the fleet'}; "
          f"{due} routers made due for generation now")
    return 0


async def _run(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    if args.action in ("disable", "enable"):
        return await _add(args, settings, db)
    if args.action == "overrides":
        print("id\taction\tselector\tmac\tcreated_at\tnote")
        for override_id, action, selector, mac, note, created in \
                await overrides_db.entries(db):
            print(f"{override_id}\t{action}\t{selector}\t{mac or 'fleet'}\t{iso_utc(created)}\t"
                  f"{note or ''}")
        return 0
    due = await overrides_db.remove(db, args.id)
    if due is None:
        raise CommandError(f"no override {args.id}")
    print(f"override {args.id} removed; {due} routers made due for generation now")
    return 0


def rules(settings: Settings, args: argparse.Namespace) -> int:
    return run_command(PROG, lambda settings, db: _run(args, settings, db), settings=settings)
