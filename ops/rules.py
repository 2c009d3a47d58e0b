"""`router-backend rules disable|enable SELECTOR [--mac MAC] [--note TEXT] | overrides |
remove ID`: keep rules off the fleet's (or one router's) IDS payloads, or always on them,
across every new ruleset. Selectors as in suricata-update: SID, GID:SID, re:REGEX,
group:FILE, classtype:NAME (engine/selectors.py). A selector is checked against the ruleset
in use: one that matches no rule is refused, not stored. The routers concerned are due for
generation at once, so they get the change within one queue poll."""

from __future__ import annotations

import argparse

from ops.command import Command, entries_arguments, operator, scope_arguments, sub_command
from server.tuning import override_sql as overrides_db
from server.db.pool import Database
from server.settings import Settings
from server.timestamps import iso_utc
from server.tuning.changes import add_override, remove_override

PROG = "router-backend rules"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    for action, help_text in (("disable", "keep matching rules off the payloads"),
                              ("enable", "always put matching rules on the payloads (within "
                                         "the budget, with their flowbit setters)")):
        command = actions.add_parser(action, help=help_text)
        command.add_argument("selector", help="SID, GID:SID, re:REGEX, group:FILE or "
                                              "classtype:NAME")
        scope_arguments(command, "override")
        command.set_defaults(act=_add)
    entries_arguments(actions, "overrides", "override", _overrides, _remove)


async def _add(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    added = await add_override(db, settings, args.action, args.selector, args.mac, args.note,
                               operator())
    print(f"override {added.id}: {added.action} {added.selector} ({added.rules_matched} rules "
          f"of ruleset {added.ruleset_version}) for {added.mac or 'the fleet'}; "
          f"{added.routers_due} routers made due for generation now")
    return 0


async def _overrides(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    print("id\taction\tselector\tmac\tcreated_at\tnote")
    for override_id, action, selector, mac, note, created in await overrides_db.entries(db):
        print(f"{override_id}\t{action}\t{selector}\t{mac or 'fleet'}\t{iso_utc(created)}\t"
              f"{note or ''}")
    return 0


async def _remove(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    due = await remove_override(db, args.id, operator())
    print(f"override {args.id} removed; {due} routers made due for generation now")
    return 0


COMMAND = Command("rules", "rule overrides: keep rules off or always on, fleet-wide or per "
                  "router", add_arguments, sub_command(PROG))
