"""`router-backend subscriptions list|add MAC [--note TEXT]|remove MAC`: the routers allowed
to call in closed registration mode (REGISTRATION_MODE=closed), with their last contact.
Server processes notice a removal within ROUTER_CACHE_SECONDS."""

from __future__ import annotations

import argparse

from ops.command import CommandError, run_command
from server.db import routers as router_db
from server.db.pool import Database
from server.mac import InvalidMac, normalise_mac
from server.settings import Settings
from server.timestamps import iso_utc

PROG = "router-backend subscriptions"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every registered router and its last contact")
    add = actions.add_parser("add", help="subscribe a router")
    add.add_argument("mac")
    add.add_argument("--note", help="free text kept with the subscription")
    remove = actions.add_parser("remove", help="remove a router's subscription")
    remove.add_argument("mac")


async def _run(args: argparse.Namespace, db: Database) -> int:
    if args.action == "list":
        rows = await router_db.list_subscriptions(db)
        print("mac\tregistered_at\tregistered_by\tlast_contact\tnote")
        for mac, registered_at, registered_by, note, last in rows:
            print(f"{mac}\t{iso_utc(registered_at)}\t{registered_by}\t"
                  f"{iso_utc(last) or 'never'}\t{note or ''}")
        return 0
    try:
        mac = normalise_mac(args.mac)
    except InvalidMac as error:
        raise CommandError(str(error)) from None
    if args.action == "add":
        new = await router_db.subscribe(db, mac, args.note)
        print(f"{mac} subscribed" if new else f"{mac} was already registered; now operator-added")
        return 0
    if not await router_db.unsubscribe(db, mac):
        raise CommandError(f"{mac} is not registered")
    print(f"{mac} removed")
    return 0


def subscriptions(settings: Settings, args: argparse.Namespace) -> int:
    return run_command(PROG, lambda _, db: _run(args, db), settings=settings)
