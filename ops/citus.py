"""`router-backend citus distribute`: the Citus mode (docs/scaling.md) for the database the
settings name, which must be a Citus coordinator with its workers added.

    router-backend citus distribute [--shard-count N]

Idempotent: it distributes the per-router tables not distributed yet and leaves the rest.
"""

from __future__ import annotations

import argparse
import sys

from server.db.citus import DISTRIBUTED_TABLES, CitusNotReady, distribute
from server.db.lifecycle import prepare_database
from server.settings import Settings

PROG = "router-backend citus"
DEFAULT_SHARD_COUNT = 32  # Citus's own default: room to add workers and move shards to them


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    action = actions.add_parser(
        "distribute", help="distribute every per-router table by MAC, co-located (once; "
                           "again after an upgrade that adds one)")
    action.add_argument("--shard-count", type=int, default=DEFAULT_SHARD_COUNT,
                        help=f"shards per table (default {DEFAULT_SHARD_COUNT}); fixed once "
                             "the first table is distributed")


def citus(settings: Settings, args: argparse.Namespace) -> int:
    if settings.embedded_database:
        print(f"{PROG}: the embedded PostgreSQL has no Citus: set DB_HOST to the "
              "coordinator", file=sys.stderr)
        return 2
    location, _ = prepare_database(settings)
    try:
        distributed = distribute(location, args.shard_count)
    except CitusNotReady as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    for table in DISTRIBUTED_TABLES:
        state = "distributed now" if table in distributed else "distributed already"
        print(f"{table}: {state}")
    print("every other table stays on the coordinator")
    return 0
