"""`router-backend enforcement`: what the routers' firewalls dropped, as their agents report
it (POST /rules/enforced, docs/router-api.md), over the last 1, 7 or 30 days: per block list
(the routers' own, the fleet's, the threat intelligence's) the routers and networks that
loaded it and where it matched, packets and bytes dropped, entries matched (and, for the
fleet's list, those of it that never matched), and the same for the IDS rules of each source
(`ids.fired`, ...: where they alerted, their alerts); per threat feed its values matched and never
matched; the entries that matched at the most networks. `--json` prints the same as JSON.
Counted as the fleet counts its evidence (server/enforcement/figures.py)."""

from __future__ import annotations

import argparse

import orjson

from ops.command import Command, run_command
from server.db.pool import Database
from server.enforcement.config import EnforcementConfig
from server.enforcement.figures import WINDOWS, Effectiveness, effectiveness
from server.settings import Settings

PROG = "router-backend enforcement"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--days", type=int, choices=WINDOWS, default=7,
                        help="the days counted, today (UTC) included (default 7)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _print(counted: Effectiveness) -> None:
    print(f"block lists and IDS rule sources, the last {counted.days} days (routers that "
          "count for the fleet)")
    print("list\trouters\tnetworks\tmatched_routers\tmatched_networks\tpackets\tbytes\t"
          "alerts\tentries_matched\tentries_never_matched")
    for row in counted.lists:
        never = "-" if row.entries_never_matched is None else row.entries_never_matched
        print(f"{row.list}\t{row.routers}\t{row.networks}\t{row.matched_routers}\t"
              f"{row.matched_networks}\t{row.packets}\t{row.bytes}\t{row.alerts}\t"
              f"{row.entries_matched}\t{never}")
    print("\nfeed\tvalues\tmatched\tnever_matched\tmatched_routers\tmatched_networks\t"
          "packets\tbytes")
    for feed in counted.feeds:
        print(f"{feed.feed}\t{feed.values}\t{feed.values_matched}\t{feed.values_never_matched}"
              f"\t{feed.matched_routers}\t{feed.matched_networks}\t{feed.packets}\t{feed.bytes}")
    print("\nlist\tentry\tnetworks\trouters\tpackets\tbytes  (the most widely matched)")
    for entry in counted.top:
        print(f"{entry.list}\t{entry.entry}\t{entry.networks}\t{entry.routers}\t"
              f"{entry.packets}\t{entry.bytes}")


def enforcement(settings: Settings, args: argparse.Namespace) -> int:
    async def show(settings: Settings, db: Database) -> int:
        counted = await effectiveness(db, EnforcementConfig.from_settings(settings), args.days)
        if args.json:
            print(orjson.dumps(counted.as_json(), option=orjson.OPT_INDENT_2).decode())
        else:
            _print(counted)
        return 0
    return run_command(PROG, show, settings=settings)


COMMAND = Command("enforcement", "what the routers' firewalls dropped, per block list and "
                  "threat feed (1, 7 or 30 days)", add_arguments, enforcement)
