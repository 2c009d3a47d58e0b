"""`router-backend feedback`: what router owners marked "not an attack" (the owners' API,
docs/notification-api.md), as the fleet counts it: the signatures most marked and from how
many networks (a candidate to disable fleet-wide, `router-backend rules disable SID`, from
FALSE_POSITIVE_NETWORKS), the threat feeds' values held by owners' marks (`intel release`
lets one through again), and each feed's sightings beside its marks."""

from __future__ import annotations

import argparse

from engine.intel import shown
from ops.command import Command, no_arguments, run_command
from server.db.pool import Database
from server.feedback.config import FeedbackConfig
from server.feedback.marks import fleet_view
from server.settings import Settings
from server.timestamps import iso_utc

PROG = "router-backend feedback"


async def _show(settings: Settings, db: Database) -> int:
    config = FeedbackConfig.from_settings(settings)
    view = await fleet_view(db, config)
    print(f"signatures marked not an attack (a candidate to disable fleet-wide from "
          f"{config.networks} networks: `router-backend rules disable SID`)")
    print("sid\tmarks\tnetworks\tcandidate")
    for entry in view["signatures"]:
        print(f"{entry['sid']}\t{entry['marks']}\t{entry['networks']}\t"
              f"{'yes' if entry['candidate'] else 'no'}")
    print("\nvalues held by owners' marks (`router-backend intel release KIND:VALUE`)")
    print("kind\tvalue\tnote\tat")
    for entry in view["held"]:
        print(f"{entry['kind']}\t{shown(entry['kind'], entry['value'])}\t{entry['note']}\t"
              f"{iso_utc(entry['at'])}")
    print("\nfeed\tsightings\tnot_an_attack")
    sighted, marked = view["feeds"]["sightings"], view["feeds"]["marked"]
    for feed in sorted(set(sighted) | set(marked)):
        print(f"{feed}\t{sighted.get(feed, 0)}\t{marked.get(feed, 0)}")
    return 0


def feedback(settings: Settings, args: argparse.Namespace) -> int:
    return run_command(PROG, _show, settings=settings)


COMMAND = Command("feedback", "what router owners marked not an attack, as the fleet counts "
                  "it", no_arguments, feedback)
