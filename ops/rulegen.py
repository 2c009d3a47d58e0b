"""`rulegen --mac MAC`: run the adaptive rule generation for one router now and print a summary
(rules chosen, how many from its own alerts, firewall entries, time taken). Exit 1 with a clear
message for an unknown router, no published ruleset, or a router being generated elsewhere."""

from __future__ import annotations

import argparse
import sys
import time

from engine.pool import WorkerFailed
from ops.command import EXIT_USAGE, CommandError, run_command
from server.db.pool import Database
from server.generation.service import GenerationConfig, GenerationRefused, generate_once
from server.generation.task import LeaseLost
from server.mac import InvalidMac, normalise_mac
from server.settings import Settings

PROG = "rulegen"


async def generate_now(settings: Settings, db: Database, mac: str) -> int:
    started = time.perf_counter()
    try:
        result = await generate_once(db, GenerationConfig.from_settings(settings), mac)
    except GenerationRefused as error:
        raise CommandError(str(error)) from None
    except (WorkerFailed, LeaseLost) as error:
        raise CommandError(f"generation for {mac} failed: {error}") from None
    stats = result.stats
    print(f"{mac}: {stats['rules']} IDS rules from ruleset {result.version} "
          f"({stats['from_alerts']} from its own alerts, {stats['sampled']} sampled, "
          f"{stats['flowbit_setters']} flowbit setters), {stats['firewall_entries']} firewall "
          f"entries ({stats['firewall_from_alerts']} from its alerts), "
          f"in {time.perf_counter() - started:.2f}s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--mac", required=True, help="the router's MAC address")
    args = parser.parse_args(argv)
    try:
        mac = normalise_mac(args.mac)
    except InvalidMac as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return EXIT_USAGE
    return run_command(PROG, lambda settings, db: generate_now(settings, db, mac))


if __name__ == "__main__":
    sys.exit(main())
