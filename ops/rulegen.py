"""`rulegen --mac MAC [--explain]`: run the adaptive rule generation for one router now and print
a summary (rules chosen, how many from overrides and its own alerts, firewall entries, time
taken); with --explain, also why each rule and each firewall entry is there (ops/explain.py).
Exit 1 with a clear message for an unknown router, no published ruleset, or a router being
generated elsewhere."""

from __future__ import annotations

import argparse
import sys
import time

from ops.command import CommandError, run_command
from server.process.exits import EXIT_USAGE
from ops.explain import explain, summary
from ruledata.workspace import Workspace
from server.generation import rules_sql as rules_db
from server.db.pool import Database
from server.generation.service import (
    GenerationConfig,
    GenerationFailed,
    GenerationRefused,
    generate_once,
)
from server.generation.sql import LeaseLost
from server.fleet import lists as fleet_lists
from server.routers.mac import InvalidMac, normalise_mac
from server.settings import Settings

PROG = "rulegen"


async def generate_now(settings: Settings, db: Database, mac: str, explained: bool,
                       summarised: bool = False) -> int:
    started = time.perf_counter()
    try:
        result = await generate_once(db, GenerationConfig.from_settings(settings), mac)
    except GenerationRefused as error:
        raise CommandError(str(error)) from None
    except (GenerationFailed, LeaseLost) as error:
        raise CommandError(f"generation for {mac} failed: {error}") from None
    stats = result.stats
    print(f"{mac}: {stats['rules']} IDS rules from ruleset {result.version} "
          f"({stats['from_overrides']} from overrides, "
          f"{stats['from_alerts']} from its own alerts, {stats['from_fleet']} from the fleet's "
          f"outbreaks, {stats['sampled']} sampled, "
          f"{stats['flowbit_setters']} flowbit setters), {stats['firewall_entries']} firewall "
          f"entries ({stats['firewall_from_alerts']} from its alerts), "
          f"in {time.perf_counter() - started:.2f}s")
    if explained:
        payloads = [(await rules_db.read_payload(db, mac, kind, frozenset()))[1]
                    for kind in ("ids", "firewall")]
        fleet = await fleet_lists.for_router(db, mac)
        if summarised:
            print(summary(*payloads, fleet))
        else:
            version_dir = Workspace(settings.rule_data_path).current_version_dir()
            print(explain(*payloads, version_dir, settings.rule_generation_telemetry_days,
                          fleet))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--mac", required=True, help="the router's MAC address")
    parser.add_argument("--explain", action="store_true",
                        help="say why each rule and firewall entry is there")
    parser.add_argument("--summary", action="store_true",
                        help="with --explain: the rules and entries counted by reason, in a "
                             "few lines")
    args = parser.parse_args(argv)
    try:
        mac = normalise_mac(args.mac)
    except InvalidMac as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.summary and not args.explain:
        parser.error("--summary goes with --explain")
    return run_command(PROG, lambda settings, db: generate_now(settings, db, mac, args.explain,
                                                               args.summary))


if __name__ == "__main__":
    sys.exit(main())
