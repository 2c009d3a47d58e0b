"""`router-backend citus ...`: the Citus mode (docs/scaling.md) for the database the settings
name, which must be a Citus coordinator.

    router-backend citus distribute [--shard-count N]
    router-backend citus add-node HOST:PORT
    router-backend citus rebalance [--no-wait]
    router-backend citus remove-node HOST:PORT

`distribute` is idempotent: it distributes the per-router tables not distributed yet.
`add-node` makes a node a worker (the database and the extension on it, then added), and
`rebalance` moves shards to it online in Citus's default transfer mode, showing progress;
interrupted, the move goes on in the background, and `rebalance` again follows it (or starts
one for what is left). `remove-node` drains a worker's shards to the others, then removes it.
"""

from __future__ import annotations

import argparse
import sys
import time

import psycopg

from ops.command import Command
from server.db.citus_nodes import (DISTRIBUTED_TABLES, CitusNotReady, add_node, distribute,
                             drain_and_remove, rebalance_status, start_rebalance)
from server.db.lifecycle import prepare_database, reach_server
from server.settings import Settings

PROG = "router-backend citus"
DEFAULT_SHARD_COUNT = 32  # Citus's own default: room to add workers and move shards to them
PROGRESS_SECONDS = 2.0


def node_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    action = actions.add_parser(
        "distribute", help="distribute every per-router table by MAC, co-located (once; "
                           "again after an upgrade that adds one)")
    action.add_argument("--shard-count", type=int, default=DEFAULT_SHARD_COUNT,
                        help=f"shards per table (default {DEFAULT_SHARD_COUNT}); fixed once "
                             "the first table is distributed")
    add = actions.add_parser("add-node", help="make a PostgreSQL with Citus installed a "
                             "worker of the service's database (no shard moves yet)")
    add.add_argument("node", type=node_address, metavar="HOST:PORT")
    rebalance = actions.add_parser("rebalance", help="move shards so every worker holds its "
                                   "share, online; progress until done")
    rebalance.add_argument("--no-wait", action="store_true",
                           help="start it and return (it runs in the background)")
    remove = actions.add_parser("remove-node", help="move a worker's shards to the others, "
                                "then remove it")
    remove.add_argument("node", type=node_address, metavar="HOST:PORT")


def citus(settings: Settings, args: argparse.Namespace) -> int:
    if settings.embedded_database:
        print(f"{PROG}: the embedded PostgreSQL has no Citus: set DB_HOST to the "
              "coordinator", file=sys.stderr)
        return 2
    try:
        if args.action == "distribute":
            return _distribute(prepare_database(settings)[0], args.shard_count)
        # The cluster's own operations: any schema, even none yet (nodes are added first).
        location = reach_server(settings)[0]
        if args.action == "add-node":
            node_id = add_node(location, *args.node)
            print(f"{args.node[0]}:{args.node[1]} is worker node {node_id}; move shards to it "
                  f"with `{PROG} rebalance`")
            return 0
        if args.action == "rebalance":
            return _rebalance(location, args.no_wait)
        drain_and_remove(location, *args.node)
        print(f"{args.node[0]}:{args.node[1]}: its shards moved to the other workers; removed")
        return 0
    except CitusNotReady as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    except psycopg.Error as error:  # with the warnings naming a worker's own error
        for line in (str(error).strip(), *getattr(error, "__notes__", ())):
            print(f"{PROG}: {line}", file=sys.stderr)
        return 1


def _distribute(location, shard_count: int) -> int:
    distributed = distribute(location, shard_count)
    for table in DISTRIBUTED_TABLES:
        state = "distributed now" if table in distributed else "distributed already"
        print(f"{table}: {state}")
    print("every other table stays on the coordinator")
    return 0


def _rebalance(location, no_wait: bool) -> int:
    job_id = start_rebalance(location)
    if job_id == 0:
        print("nothing to move: every worker holds its share")
        return 0
    print(f"rebalance: Citus background job {job_id} (citus_rebalance_status() shows it; "
          "citus_rebalance_stop() stops it)", flush=True)
    if no_wait:
        return 0
    shown = None
    try:
        while True:
            status = rebalance_status(location, job_id)
            line = f"job {job_id}: {status.state}, {status.done} of {status.total} moves done"
            if line != shown:
                print(line, flush=True)
                shown = line
            for error in status.errors:
                print(f"  a move failed (Citus retries it): {error}", flush=True)
            if status.over:
                return 0 if status.state == "finished" else 1
            time.sleep(PROGRESS_SECONDS)
    except KeyboardInterrupt:
        print(f"\nno longer following job {job_id}: it goes on in the background; "
              f"`{PROG} rebalance` follows it again")
        return 130


COMMAND = Command("citus", "Citus mode: distribute the per-router tables over the workers",
                  add_arguments, citus)
