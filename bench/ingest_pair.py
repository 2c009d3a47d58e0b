"""Ingestion of this checkout against another's (the release before a change), both servers
up at once on one PostgreSQL, their rounds alternating: on a shared machine whose speed
moves by a third from one minute to the next, whole benchmark runs in turn
(bench/pair.py) need dozens of runs to show a few per cent; rounds of a few seconds,
one side's then the other's, share more of the machine's moments (how much it still
scatters: this checkout against itself, in bench/README.md).

    python -m bench.ingest_pair --before /path/to/checkout [--before-python P]
        [--records 120000] [--per-request 10000] [--rounds 10] [--body alerts|corpus]
        [--workers 1] [--set NAME=VALUE]

The other checkout's server runs from that checkout with its own virtualenv
(`.venv/bin/python` in it, or --before-python) on a database its own `router-backend
migrate` made; this one's on a database migrated here. Each round: both databases' telemetry
emptied and a CHECKPOINT, then the same bodies (bench/ingest.py's, one client) sent to one
side and timed, then to the other (which goes first alternates); the hunt indexer is waited
for after its upload, untimed (either side's, when its release has one), so that its work
falls in its own round and not in the other side's. A COPY of the same records
(bench/ingest.py's reference) is timed every round too. Prints each side's median
records/s, the ratio of the medians and the median of the rounds' own ratios. --workers:
both servers' HTTP_WORKERS (1, the default: one process serves and indexes; above 1 the
supervisor runs the indexer in its background process, as `auto` does). --set: a
setting of this side's server (repeatable), e.g. HUNT_INDEX_SECONDS=3600 for this side
without its indexer (then not waited for).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from psycopg import sql as pgsql

from bench.crash_drill import INDEX_TIMEOUT, await_indexed
from bench.ingest import (add_settings_option, check_stored, copy_text, make_lines,
                              ndjson_bodies, run_copy, run_http, truncate)
from server.db.connect import execute_alone
from server.db.location import DatabaseLocation
from testkit.database import Sql, database_env, database_server, migrated_database
from testkit.server import running_server


@contextlib.contextmanager
def before_database(server: DatabaseLocation, checkout: Path, python: str,
                    workdir: Path) -> Iterator[DatabaseLocation]:
    """A database made and migrated by the other checkout's own `migrate`, dropped after."""
    location = server.with_name(f"before_{uuid.uuid4().hex[:12]}")
    env = {**os.environ, **database_env(location), "DATA_DIR": str(workdir),
           "DB_LOG_LEVEL": "error"}
    try:
        done = subprocess.run([python, "-m", "ops.cli", "migrate"], env=env, cwd=checkout,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"migrate in {checkout} failed: {done.stderr[-2000:]}")
        yield location
    finally:
        execute_alone(server, pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            pgsql.Identifier(location.name)))


@contextlib.contextmanager
def paired_servers(before: Path, before_python: str, this_settings: dict[str, str],
                   before_settings: dict[str, str]
                   ) -> Iterator[tuple[Path, dict[str, tuple[DatabaseLocation, object]]]]:
    """This checkout's server and the other checkout's, each on a database of its own
    release's migrations on one PostgreSQL: a scratch directory, and each side's (database,
    running server) by "this" and "before"."""
    with database_server("DB_") as server, \
            tempfile.TemporaryDirectory(prefix="bench-") as scratch, \
            migrated_database(server, "bench") as this_db, \
            before_database(server, before, before_python, Path(scratch) / "b") as before_db, \
            running_server(this_db, Path(scratch) / "t", **this_settings) as this_server, \
            running_server(before_db, Path(scratch) / "b", checkout=before,
                           python=before_python, **before_settings) as before_server:
        yield Path(scratch), {"this": (this_db, this_server),
                              "before": (before_db, before_server)}


def has_indexer(location: DatabaseLocation) -> bool:
    """The release has the hunt indexer (migration 0032), whose work after a round is waited
    for so that it does not fall in the other side's."""
    return Sql(location).value("SELECT to_regclass('hunt_pending') IS NOT NULL")


def one_round(location: DatabaseLocation, port: int, bodies: list[tuple[str, bytes]],
              kinds: Counter, indexed: bool) -> float:
    """Seconds to upload every body to one side, every record checked stored; its indexer
    waited for afterwards when it has one that runs (`indexed`)."""
    seconds = asyncio.run(run_http(port, bodies, 1))
    check_stored(location, kinds)
    if indexed:
        asyncio.run(await_indexed(location, INDEX_TIMEOUT))
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--before-python", help="its Python (default: its .venv's)")
    parser.add_argument("--records", type=int, default=120_000)
    parser.add_argument("--per-request", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--body", choices=("alerts", "corpus"), default="alerts")
    parser.add_argument("--workers", type=int, default=1, help="HTTP_WORKERS of both")
    add_settings_option(parser, "this side's server")
    args = parser.parse_args()
    workers = {"HTTP_WORKERS": str(args.workers)}
    settings = {**workers, **dict(args.set)}
    before_python = args.before_python or str(args.before / ".venv" / "bin" / "python")

    lines = make_lines(args.records, args.body)
    bodies = ndjson_bodies(lines, args.per_request)
    kinds = Counter(endpoint for endpoint, _ in lines)
    copy_data = copy_text([line for _, line in lines], datetime.now(timezone.utc).isoformat())
    print(f"{args.records} records ({args.body}: "
          f"{', '.join(f'{n} to /log/{kind}' for kind, n in sorted(kinds.items()))}) in "
          f"{len(bodies)} bodies, one client, {args.workers} HTTP worker(s); this checkout "
          f"against {args.before}")

    rates: dict[str, list[float]] = {"before": [], "this": []}
    copies: list[float] = []
    with paired_servers(args.before, before_python, settings, workers) as (_, servers):
        (this_db, this_server), (before_db, before_server) = servers["this"], servers["before"]
        sides = {"before": (before_db, before_server.port, has_indexer(before_db)),
                 "this": (this_db, this_server.port, "HUNT_INDEX_SECONDS" not in settings)}
        for number in range(args.rounds):
            truncate(before_db)
            truncate(this_db)
            copies.append(args.records / run_copy(this_db, copy_data))
            order = ("before", "this") if number % 2 == 0 else ("this", "before")
            for side in order:
                location, port, indexed = sides[side]
                rates[side].append(args.records / one_round(location, port, bodies, kinds,
                                                            indexed))
            before, this = rates["before"][-1], rates["this"][-1]
            print(f"round {number + 1}: before {before:,.0f}, this {this:,.0f} records/s "
                  f"({this / before:.3f}), COPY {copies[-1]:,.0f}", flush=True)
    before, this = statistics.median(rates["before"]), statistics.median(rates["this"])
    paired = statistics.median(t / b for t, b in zip(rates["this"], rates["before"]))
    print(f"before: median {before:,.0f} records/s; this: median {this:,.0f}; COPY median "
          f"{statistics.median(copies):,.0f}")
    print(f"this/before: {this / before:.3f} on the medians, {paired:.3f} the median of the "
          f"rounds' ratios ({args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
