"""`router-backend fleet attackers | outbreaks | run [--json]`: the fleet's lists as the `fleet`
job last stored them (server/fleet/job.py), with their evidence; `run` runs the job now
(exclusively with the scheduled runs) and prints what it found."""

from __future__ import annotations

import argparse
import sys

import orjson

from engine.addresses import canonical_text
from ops.command import Command, CommandError, run_command
from server.db.pool import Database
from server.jobs.cron import run_job
from server.fleet.config import FleetConfig
from server.fleet.job import run_fleet
from server.fleet import lists as fleet_lists
from server.fleet.explain import stories, story_lines, summary_line
from server.settings import Settings

PROG = "router-backend fleet"
REPORTERS_SHOWN = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    for name, text in (("attackers", "addresses reported from enough networks: every router "
                                     "blocks them (GET /rules/fleet)"),
                       ("outbreaks", "signatures firing at enough networks: kept in every "
                                     "IDS payload")):
        listing = actions.add_parser(name, help=text)
        listing.set_defaults(act=_attackers if name == "attackers" else _outbreaks)
        listing.add_argument("--json", action="store_true", help="one JSON document, every "
                             "field (the reporters kept: at most 50 per entry)")
        if name == "attackers":
            listing.add_argument("--why", metavar="ADDR", type=_address,
                                 help="one address's story: who reported it, what counted, "
                                      "which rule kept it out or listed it")
    actions.add_parser("run", help="count the fleet's lists now").set_defaults(act=_run_now)


def reporters_text(entry: dict) -> str:
    """The first reporters (MAC, network, alerts) of an entry, and how many more."""
    shown = ", ".join(f"{mac} ({network}) ×{alerts}"
                      for mac, network, alerts in entry["reporters"][:REPORTERS_SHOWN])
    more = entry["routers"] - min(entry["routers"], REPORTERS_SHOWN)
    return shown + (f" and {more} more" if more else "")


def attacker_lines(entries: list[dict]) -> list[str]:
    lines = ["address\trouters\tnetworks\talerts\tsignatures\tfirst_seen\tlast_seen\t"
             "expires_at\treporters"]
    for entry in entries:
        sids = ",".join(str(sid) for sid in entry["signatures"][:10])
        lines.append(f"{entry['address']}\t{entry['routers']}\t{entry['networks']}\t"
                     f"{entry['alerts']}\t{sids}\t{entry['first_seen']}\t{entry['last_seen']}\t"
                     f"{entry['expires_at']}\t{reporters_text(entry)}")
    return lines


def outbreak_lines(entries: list[dict]) -> list[str]:
    lines = ["sid\tseverity\trouters\tnetworks\talerts\tfirst_seen\tlast_seen\treporters"]
    for entry in entries:
        lines.append(f"{entry['sid']}\t{entry['severity']}\t{entry['routers']}\t"
                     f"{entry['networks']}\t{entry['alerts']}\t{entry['first_seen']}\t"
                     f"{entry['last_seen']}\t{reporters_text(entry)}")
    return lines


async def _run_now(args: argparse.Namespace, config: FleetConfig, db: Database) -> int:
    outcome = await run_job(db, "fleet", lambda: run_fleet(db, config))
    if outcome.status != "succeeded":
        raise CommandError(outcome.error or "the fleet job is running in another process")
    print(" ".join(f"{name}={value}" for name, value in outcome.detail.items()))
    return 0


async def _attackers(args: argparse.Namespace, config: FleetConfig, db: Database) -> int:
    if args.why is not None:
        found = await stories(db, config, args.why)
        print("\n".join(story_lines(found[0], config)) if found else
              f"{args.why}: not reported in the last {config.window_hours} h at "
              f"severity {config.severity} or worse")
        return 0
    entries = await fleet_lists.attackers(db)
    if args.json:
        print(orjson.dumps(entries, option=orjson.OPT_INDENT_2).decode())
        return 0
    print("\n".join(attacker_lines(entries)))
    # an empty list explains itself, beside the rows
    print(summary_line(await stories(db, config), config), file=sys.stderr)
    return 0


async def _outbreaks(args: argparse.Namespace, config: FleetConfig, db: Database) -> int:
    entries = await fleet_lists.outbreaks(db)
    print(orjson.dumps(entries, option=orjson.OPT_INDENT_2).decode() if args.json
          else "\n".join(outbreak_lines(entries)))
    return 0


def _address(text: str) -> str:
    try:
        return canonical_text(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IP address: {text!r}") from None


def fleet(settings: Settings, args: argparse.Namespace) -> int:
    return run_command(PROG, lambda settings, db: args.act(
        args, FleetConfig.from_settings(settings), db), settings=settings)


COMMAND = Command("fleet", "what the fleet sees together: its attackers and outbreaks, with "
                  "evidence", add_arguments, fleet)
