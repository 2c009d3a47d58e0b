"""`router-backend allowlist add CIDR [--mac MAC] [--note TEXT] | list | remove ID`: networks
that no router's firewall payload ever blocks (or, with --mac, that router's), whatever the
reason (its alerts or the compromised list). Adding an entry makes the routers concerned due
for generation now."""

from __future__ import annotations

import argparse

from ops.command import Command, entries_arguments, operator, run_command, scope_arguments
from server.tuning import allowlist_sql as allowlist_db
from server.db.pool import Database
from server.settings import Settings
from server.timestamps import iso_utc
from server.tuning.changes import add_allowed, remove_allowed

PROG = "router-backend allowlist"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="never block this address or network")
    add.add_argument("network", help="an address or a network in CIDR form")
    scope_arguments(add, "entry")
    add.set_defaults(act=_add)
    entries_arguments(actions, "list", "entry", _list, _remove)


async def _list(args: argparse.Namespace, db: Database) -> int:
    print("id\tnetwork\tmac\tcreated_at\tnote")
    for entry_id, network, mac, note, created in await allowlist_db.entries(db):
        print(f"{entry_id}\t{network}\t{mac or 'fleet'}\t{iso_utc(created)}\t{note or ''}")
    return 0


async def _remove(args: argparse.Namespace, db: Database) -> int:
    await remove_allowed(db, args.id, operator())
    print(f"allowlist entry {args.id} removed")
    return 0


async def _add(args: argparse.Namespace, db: Database) -> int:
    entry_id, network, mac, due = await add_allowed(db, args.network, args.mac, args.note,
                                                    operator())
    if entry_id is None:
        print(f"{network} is on the allowlist {'of ' + mac if mac else 'of the fleet'} already")
        return 0
    print(f"allowlist entry {entry_id}: {network} for {mac or 'the fleet'}; "
          f"{due} routers made due for generation now")
    return 0


def allowlist(settings: Settings, args: argparse.Namespace) -> int:
    return run_command(PROG, lambda _, db: args.act(args, db), settings=settings)


COMMAND = Command("allowlist", "networks never blocked by a router's firewall payload",
                  add_arguments, allowlist)
