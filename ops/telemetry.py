"""`router-backend telemetry export|sql|compact`: a router's stored records as NDJSON, the
same records as rows of temporary tables in psql, and the compaction job run by hand.

    router-backend telemetry export --mac MAC [--kind events|cfm] [--since T] [--until T]
    router-backend telemetry sql --mac MAC [--kind ...] [--since T] [--until T] [psql args]
    router-backend telemetry compact [--all]

T is an ISO 8601 time (UTC when it names no zone), compared with each record's receive
time: records received at or after --since and before --until.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ops.command import Command, CommandError, UsageError, mac_argument, run_command
from server.routers import sql as router_db
from server.db.embedded import embedded_program
from server.db.pool import Database
from server.jobs.cron import run_job
from server.settings import Settings
from server.hunt.sql import UNREAD_UPLOAD
from server.telemetry.compaction import compact
from server.telemetry.export import ndjson, records_carrying, stored_records
from server.telemetry.indicators import IndicatorError, match_argument
from server.telemetry.sql_tables import write_session

PROG = "router-backend telemetry"


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    for name, help_text in (("export", "a router's records as NDJSON on standard output, "
                                       "oldest first"),
                            ("sql", "psql with the router's records in temporary tables "
                                    "ids_events and cfm_records; further arguments go to "
                                    "psql")):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("--mac", required=True)
        action.add_argument("--kind", choices=("events", "cfm"),
                            help="records sent to /log/events or /log/cfm (default: both)")
        action.add_argument("--since", type=_moment, help="received at or after this time")
        action.add_argument("--until", type=_moment, help="received before this time")
        if name == "export":
            action.add_argument("--match", metavar="KIND:VALUE",
                                help="only the records carrying it (kinds as `hunt`'s: ip, "
                                     "domain (and names under it), ja3, ja4, sid, sha256)")
    compact_parser = actions.add_parser(
        "compact", help="merge small chunks now (and move rows of before migration 0018)")
    compact_parser.add_argument("--all", action="store_true",
                                help="every partition and every chunk, however recent")


async def _export(settings: Settings, args: argparse.Namespace, db: Database) -> int:
    mac = mac_argument(args.mac)
    wanted = None
    if args.match is not None:  # a bad argument is told as one (exit 2) before any lookup
        try:
            wanted = match_argument(args.match)
        except IndicatorError as error:
            raise UsageError(f"--match: {error}") from None
    if not await router_db.is_known(db, mac):
        raise CommandError(f"{mac} is not a router of this service: never registered here, "
                           "or removed with no telemetry left (`router-backend subscriptions "
                           "list` names the routers)")

    def write() -> int:
        out = sys.stdout.buffer
        count = 0
        if wanted is not None:
            for stored in records_carrying(db.location, mac, wanted, args.kind, args.since,
                                           args.until):
                out.write(stored.line + b"\n")
                count += 1
        else:
            for records, text in ndjson(db.location, mac, args.kind, args.since, args.until):
                out.write(text)
                count += records
        out.flush()
        return count

    count = await asyncio.to_thread(write)
    print(f"{PROG} export: {count} records of {mac}", file=sys.stderr)
    return 0


async def _sql(settings: Settings, args: argparse.Namespace, db: Database) -> int:
    mac = mac_argument(args.mac)
    psql = embedded_program("psql") if settings.embedded_database else shutil.which("psql")
    if psql is None:
        raise CommandError("psql not found on PATH")
    with tempfile.TemporaryDirectory(prefix="telemetry-sql-") as folder:
        records = stored_records(db.location, mac, args.kind, args.since, args.until)
        start_up, loaded = await asyncio.to_thread(write_session, mac, records, Path(folder))
        print(f"{PROG} sql: {loaded['events']} records in ids_events, {loaded['cfm']} in "
              "cfm_records (temporary tables of this session)", file=sys.stderr)
        location = db.location
        process = await asyncio.create_subprocess_exec(
            psql, "-h", location.host, "-p", str(location.port), "-U", location.user,
            "-d", location.name, *args.psql_args,
            env={**os.environ, "PGPASSWORD": location.password, "PSQLRC": str(start_up)})
        return await process.wait()


async def _compact(settings: Settings, args: argparse.Namespace, db: Database) -> int:
    settle = timedelta(0 if args.all else settings.telemetry_compact_settle_seconds)
    outcome = await run_job(db, "telemetry-compact", lambda: _detail(
        compact(db, settings.telemetry_chunk_records, settle, UNREAD_UPLOAD,
                everything=args.all, fleet_window=timedelta(hours=settings.fleet_window_hours))))
    if outcome.status != "succeeded":
        raise CommandError(outcome.error or "another compaction is in progress")
    detail = outcome.detail
    for table, moved in detail["legacy"].items():
        print(f"{PROG} compact: {moved} records moved from {table} into chunks")
    print(f"{PROG} compact: {detail['merged_chunks']} chunks merged into "
          f"{detail['written_chunks']} ({detail['records']} records)")
    for day in detail["rewritten"]:
        print(f"{PROG} compact: closed day {day['partition']} rewritten: "
              + (f"{day['bytes_before']:,} -> {day['bytes_after']:,} bytes" if day["swapped"]
                 else "left for the next run (changed, or its table kept busy)"))
    for kind, packed in detail["summary_days"].items():
        print(f"{PROG} compact: {kind} summaries: {packed['router_days']} router-days packed, "
              f"{len(packed['partitions_dropped'])} hourly partitions dropped"
              + (f", {', '.join(packed['partitions_deferred'])} left for the next run"
                 if packed["partitions_deferred"] else "")
              + (f", {packed['routers_left_as_rows']} router-days too large for one row "
                 f"left as rows in {', '.join(packed['partitions_kept'])}"
                 if packed["routers_left_as_rows"] else "")
              + (f"; the open day's settled hours: {packed['open_day']['router_days']} "
                 "router-days packed" if "open_day" in packed else ""))
    return 0


async def _detail(report) -> dict:
    return (await report).as_detail()


ACTIONS = {"export": _export, "sql": _sql, "compact": _compact}


def telemetry(settings: Settings, args: argparse.Namespace) -> int:
    action = ACTIONS[args.action]
    return run_command(f"{PROG} {args.action}", lambda settings, db: action(settings, args, db),
                       settings=settings)


COMMAND = Command("telemetry", "a router's stored records (export, sql) and the compaction "
                  "job",
                  add_arguments, telemetry)
