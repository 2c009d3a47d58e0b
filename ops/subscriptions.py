"""`router-backend subscriptions list|add MAC [--note TEXT] [--user ID --email ADDR]|owner MAC
[--user ID --email ADDR]|remove MAC|rotate-key MAC|reset MAC`:
the routers allowed to call in closed registration mode (REGISTRATION_MODE=closed), with
their last activation record and telemetry upload, and their keys (ROUTER_AUTH=key). `add`
prints a new router's key in key mode, `rotate-key` replaces it, `remove` revokes it with the
router, `reset` revokes it so that the router can enroll again (a factory-reset router)
within ENROLLMENT_RESET_WINDOW_MINUTES and only then: nobody else holding the fleet token can
enroll it later on. A key is printed once: only its hash is stored. Every server process
forgets a rotated or revoked key at once (notified by the database); a removed router's
registration within ROUTER_CACHE_SECONDS. A router's owner (`--user`, `--email`: the
notification service's user and address) is told of its threat sightings (docs/intel.md)
and gets a weekly report of all their routers (`--weekly on|off`, `--weekly-at`, `--zone`:
docs/notification-api.md); given alone, these change the current owner's report only."""

from __future__ import annotations

import argparse
import logging

from ops.command import Command, CommandError, UsageError, mac_argument, operator, sub_command
from server.intel import sql as intel_db
from server.routers import key_sql as keys_db
from server.routers import sql as router_db
from server.db.pool import Database
from server.notify.fields import FieldError, recipient_field, text_field
from server.feedback.config import FeedbackConfig
from server.feedback.marks import owner_changed
from server.removal import unsubscribe
from server.reports.choices import change_schedule
from server.reports.schedule import ScheduleInvalid
from server.routers.keys import key_hash, new_key
from server.settings import Settings
from server.tuning.changes import reset_enrollment
from server.timestamps import iso_utc

PROG = "router-backend subscriptions"
log = logging.getLogger("router_backend.trust")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every registered router, its last activation record "
                       "and its last telemetry upload").set_defaults(act=_list)
    add = actions.add_parser("add", help="subscribe a router")
    add.add_argument("mac")
    add.add_argument("--note", help="free text kept with the subscription")
    owner = actions.add_parser("owner", help="who is told of the router's threat sightings "
                               "(docs/intel.md) and gets its weekly report "
                               "(docs/notification-api.md)")
    owner.add_argument("mac")
    owner.add_argument("--weekly", choices=("on", "off"),
                       help="the owner's weekly report of all their routers on or off")
    owner.add_argument("--weekly-at", metavar="'DAY HH:00'",
                       help="when the owner's weekly report comes, e.g. 'mon 08:00' "
                            "(default: mon 08:00)")
    owner.add_argument("--zone", help="the time zone of --weekly-at, e.g. Europe/Prague "
                                      "(default: UTC)")
    for parser_ in (add, owner):
        parser_.add_argument("--user", help="the owner's user id in the notification service")
        parser_.add_argument("--email", help="the owner's address, where sightings are emailed")
    add.set_defaults(act=_add)
    owner.set_defaults(act=_set_owner)
    for name, act, text in (
            ("remove", _remove, "remove a router's subscription (and its key)"),
            ("rotate-key", _rotate_key, "replace a router's key; prints the new one"),
            ("reset", _reset, "revoke a router's key so that it can enroll again (after a "
                              "factory reset)")):
        one = actions.add_parser(name, help=text)
        one.add_argument("mac")
        one.set_defaults(act=act)


async def _list(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    rows = await router_db.list_subscriptions(db)
    print("mac\tregistered_at\tregistered_by\tlast_activation\tlast_upload\tnote")
    for mac, registered_at, registered_by, note, activation, upload in rows:
        print(f"{mac}\t{iso_utc(registered_at)}\t{registered_by}\t"
              f"{iso_utc(activation) or 'never'}\t{iso_utc(upload) or 'never'}\t"
              f"{note or ''}")
    return 0


async def _add(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    mac, owner = mac_argument(args.mac), _owner(args)
    new = await router_db.subscribe(db, mac, args.note)
    print(f"{mac} subscribed" if new else f"{mac} was already registered; now operator-added")
    if owner:
        await intel_db.set_owner(db, mac, *owner, operator())
        await owner_changed(db, FeedbackConfig.from_settings(settings), mac, owner[0])
        print(f"{mac}: sightings told to {owner[0]} <{owner[1]}>")
    if settings.router_auth == "key":
        await _issue_key(db, mac, replace=False)
    return 0


async def _set_owner(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    mac, owner = mac_argument(args.mac), _owner(args)
    scheduling = any(value is not None for value in (args.weekly, args.weekly_at, args.zone))
    if owner is not None or not scheduling:  # the report's options alone keep the owner
        user, email = owner or (None, None)
        if not await intel_db.set_owner(db, mac, user, email, operator()):
            raise CommandError(f"{mac} is not registered")
        await owner_changed(db, FeedbackConfig.from_settings(settings), mac, user)
        print(f"{mac}: sightings told to {user} <{email}>" if user
              else f"{mac}: no owner; its sightings are listed for operators")
    if scheduling:
        await _schedule(db, mac, args)
    return 0


async def _schedule(db: Database, mac: str, args: argparse.Namespace) -> None:
    registered, user, _ = await intel_db.owner_of(db, mac)
    if not registered:
        raise CommandError(f"{mac} is not registered")
    if user is None:
        raise UsageError(f"{mac} has no owner: give --user and --email too")
    weekly = None if args.weekly is None else args.weekly == "on"
    try:
        schedule = await change_schedule(db, user, weekly, args.weekly_at, args.zone)
    except ScheduleInvalid as error:
        raise UsageError(str(error)) from None
    print(f"{user}: weekly report {'every ' + schedule.described if schedule.weekly else 'off'}")


async def _rotate_key(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    await _issue_key(db, mac_argument(args.mac), replace=True)
    return 0


async def _reset(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    mac, minutes = mac_argument(args.mac), settings.enrollment_reset_window_minutes
    revoked = await reset_enrollment(db, mac, minutes, operator())
    log.warning("router %s reset by an operator (key %s): it may enroll within %d "
                "minutes", mac, "revoked" if revoked else "none", minutes)
    print(f"{mac}: {'key revoked; ' if revoked else ''}the router may enroll within the "
          f"next {minutes} minutes (ENROLLMENT_RESET_WINDOW_MINUTES), and only then")
    return 0


async def _remove(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    mac = mac_argument(args.mac)
    if not await unsubscribe(db, mac):
        raise CommandError(f"{mac} is not registered")
    log.warning("router %s removed by an operator (its key, if any, revoked)", mac)
    print(f"{mac} removed")
    return 0


def _owner(args: argparse.Namespace) -> tuple[str, str] | None:
    """--user and --email, both or neither (neither: no owner); UsageError otherwise."""
    if not args.user and not args.email:
        return None
    if not (args.user and args.email):
        raise UsageError("give both --user and --email (or neither, for no owner)")
    try:
        user, email = text_field("userId", args.user), recipient_field(args.email)
    except FieldError as error:
        raise UsageError(str(error)) from None
    return user, email


async def _issue_key(db: Database, mac: str, replace: bool) -> None:
    key = new_key()
    if not await keys_db.set_key(db, mac, key_hash(key), replace):
        if replace:
            raise CommandError(f"{mac} has no key to rotate (subscribe it, or let it enroll)")
        print(f"{mac} has a key already (rotate it with `{PROG} rotate-key {mac}`)")
        return
    log.warning("router key of %s %s by an operator", mac, "rotated" if replace else "issued")
    print(f"key for {mac} (shown once, only its hash is stored):\n{key}")


COMMAND = Command("subscriptions", "list, add or remove router subscriptions (closed mode)",
                  add_arguments, sub_command(PROG))
