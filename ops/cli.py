"""`router-backend`: run the service (`serve`, the default) and operator utilities."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import shutil
import sys

from ops.allowlist import add_arguments as add_allowlist_arguments
from ops.allowlist import allowlist
from ops.fleet import add_arguments as add_fleet_arguments
from ops.fleet import fleet
from ops.hunt import add_arguments as add_hunt_arguments
from ops.hunt import hunt
from ops.intel import add_arguments as add_intel_arguments
from ops.intel import intel
from ops.backup import add_backup_arguments, add_restore_arguments, backup, restore
from ops.citus import add_arguments as add_citus_arguments
from ops.citus import citus
from ops.command import CommandError, run_command, stdout_closed
from ops.console import add_arguments as add_console_arguments
from ops.console import console
from ops.rules import add_arguments as add_rules_arguments
from ops.rules import rules
from ops.status import add_arguments as add_status_arguments
from ops.status import status
from ops.subscriptions import add_arguments as add_subscription_arguments
from ops.subscriptions import subscriptions
from ops.telemetry import add_arguments as add_telemetry_arguments
from ops.telemetry import telemetry
from server import SERVICE_VERSION
from server.db.embedded import embedded_program
from server.db.lifecycle import prepare_database, reach_server
from server.db.migrate import SchemaNotReady, release_schema_version, roll_back_migrations
from server.db.pool import Database
from server.exposure import refuse_unchosen
from server.jobs.cron import run_job
from server.jobs.retention import run_retention
from server.telemetry.summary import summaries_kept
from server.settings import Settings, SettingsError, load_settings, unrecognised_settings
from server.logs import configure_logging
from server.process.instance import only_service_on
from server.process.child import run as run_process
from server.process.supervisor import Supervisor, refuse_taken_listeners

log = logging.getLogger("router_backend.settings")


def serve(settings: Settings, args: argparse.Namespace) -> int:
    """One process doing everything (HTTP_WORKERS=1), or the supervisor of HTTP_WORKERS
    workers, which starts its children by their own entry (server/process/child.py)."""
    refuse_unchosen(settings)
    with only_service_on(settings):
        refuse_taken_listeners(settings)  # before the database is made or touched
        workers = getattr(args, "workers", None) or settings.http_workers
        if workers > 1:
            return Supervisor(settings, workers).run()
        return run_process(settings)


def migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Create the database when missing and apply pending migrations, then exit: for
    deployments that migrate as a step of their own before starting the new release (`serve`
    also does it at start-up). Every other command only checks the schema. With `--down-to N`,
    roll back instead to schema N, for the release before an upgrade (the service stopped)."""
    if args.down_to is not None:
        return roll_back(settings, args.down_to)
    location, embedded = prepare_database(settings, migrate=True)
    try:
        print(f"router-backend migrate: database {location.name!r} on {location.describe()} "
              f"is at schema {release_schema_version()}")
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


def roll_back(settings: Settings, down_to: str) -> int:
    with only_service_on(settings, doing="rolling back migrations"):
        location, embedded = reach_server(settings)
        try:
            rolled_back = roll_back_migrations(location, down_to)
        finally:
            if embedded is not None:
                embedded.stop()
    print(f"router-backend migrate: rolled back {', '.join(rolled_back) or 'nothing'}; "
          f"database {location.name!r} is at schema {down_to}")
    return 0


def schema_number(text: str) -> str:
    if not re.fullmatch(r"\d{4}", text):
        raise argparse.ArgumentTypeError(f"expected a schema number such as 0021, got {text!r}")
    return text


def dbshell(settings: Settings, args: argparse.Namespace) -> int:
    """psql on the service's database (the embedded server's own psql when embedded); the
    embedded server stays up while psql runs."""
    async def body(settings: Settings, db: Database) -> int:
        psql = embedded_program("psql") if settings.embedded_database else shutil.which("psql")
        if psql is None:
            raise CommandError("psql not found on PATH")
        location = db.location
        process = await asyncio.create_subprocess_exec(
            psql, "-h", location.host, "-p", str(location.port), "-U", location.user,
            "-d", location.name, *args.psql_args,
            env={**os.environ, "PGPASSWORD": location.password})
        return await process.wait()
    return run_command("router-backend dbshell", body, settings=settings)


def retention(settings: Settings, args: argparse.Namespace) -> int:
    """Run the retention job once now (whatever DATA_RETENTION_ENABLED says: an operator
    asked), exclusively with the scheduled runs."""
    async def body(settings: Settings, db: Database) -> int:
        outcome = await run_job(db, "retention", lambda: run_retention(
            db, settings.retention_days, settings.activation_retention_days,
            hunt_days=settings.hunt_retention_days,
            summaries_kept=summaries_kept(settings)))
        if outcome.status != "succeeded":
            raise CommandError(outcome.error or "another retention run is in progress")
        detail = outcome.detail
        for table, label, cutoff in (
                ("telemetry_chunks", "telemetry chunks", detail["cutoff"]),
                ("telemetry_alerts", "alert summaries", detail["summary_cutoff"]),
                ("telemetry_flows", "flow summaries", detail["summary_cutoff"]),
                ("telemetry_alert_days", "packed days of alert summaries",
                 detail["packed_summary_cutoff"]),
                ("telemetry_flow_days", "packed days of flow summaries",
                 detail["packed_summary_cutoff"]),
                ("activations", "activations", detail["activation_cutoff"]),
                ("activation_days", "activation days", detail["activation_cutoff"]),
                ("hunt_postings", "hunt index", detail["hunt_cutoff"])):
            removed = detail["removed"][table]
            dropped = removed["partitions_dropped"]
            print(f"retention: {label} before {cutoff}: {len(dropped)} partitions dropped "
                  f"(about {removed['rows_in_dropped_partitions_estimate']} rows), "
                  f"{removed['rows_deleted']} rows deleted")
            if removed["partitions_deferred"]:
                print(f"retention: {label}: {', '.join(removed['partitions_deferred'])} left "
                      "for the next run (uploads kept the table busy)")
        return 0
    return run_command("router-backend retention", body, settings=settings)


def positive_integer(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {number}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="router-backend",
                                     description="Router IDS backend and notification service.")
    parser.add_argument("--version", action="version",
                        version=f"router-backend {SERVICE_VERSION}")
    commands = parser.add_subparsers(dest="command")
    serve_parser = commands.add_parser("serve", help="run the HTTP service (the default)")
    serve_parser.add_argument("--workers", type=positive_integer, default=None,
                              help="HTTP worker processes (default: HTTP_WORKERS)")
    migrate_parser = commands.add_parser(
        "migrate", help="create the database when missing and apply pending migrations, then "
                        "exit (serve does it too; other commands only check)")
    migrate_parser.add_argument("--down-to", type=schema_number, default=None,
                                help="roll back to this schema (e.g. 0021) instead, for the "
                                     "release before an upgrade; the service stopped")
    commands.add_parser("retention", help="delete telemetry older than RETENTION_DAYS and "
                        "activations older than ACTIVATION_RETENTION_DAYS, now")
    add_subscription_arguments(commands.add_parser(
        "subscriptions", help="list, add or remove router subscriptions (closed mode)"))
    add_status_arguments(commands.add_parser(
        "status", help="the fleet at a glance: routers, applied rules, the generation queue, "
                       "the ruleset, telemetry, notifications"))
    add_rules_arguments(commands.add_parser(
        "rules", help="rule overrides: keep rules off or always on, fleet-wide or per router"))
    add_allowlist_arguments(commands.add_parser(
        "allowlist", help="networks never blocked by a router's firewall payload"))
    add_fleet_arguments(commands.add_parser(
        "fleet", help="what the fleet sees together: its attackers and outbreaks, with evidence"))
    add_hunt_arguments(commands.add_parser(
        "hunt", help="which routers saw an address, a domain, a TLS fingerprint, a signature "
                     "or a file, and since when (recorded)"))
    add_intel_arguments(commands.add_parser(
        "intel", help="threat feeds delivered to every router and retro-hunted; their "
                      "sightings, told to the routers' owners"))
    add_telemetry_arguments(commands.add_parser(
        "telemetry", help="a router's stored records (export, sql) and the compaction job"))
    add_console_arguments(commands.add_parser(
        "console", help="console sign-ins: make a CONSOLE_USERS entry; list or end sessions"))
    add_citus_arguments(commands.add_parser(
        "citus", help="Citus mode: distribute the per-router tables over the workers"))
    add_backup_arguments(commands.add_parser(
        "backup", help="a consistent copy of the database (pg_dump), while the service runs"))
    add_restore_arguments(commands.add_parser(
        "restore", help="put a backup back into an empty database (the service stopped)"))
    commands.add_parser("dbshell", help="open psql on the service's database; further "
                        "arguments go to psql, e.g. -c 'SELECT count(*) FROM routers'")
    return parser


COMMANDS = {"serve": serve, "migrate": migrate, "dbshell": dbshell, "retention": retention,
            "subscriptions": subscriptions, "allowlist": allowlist, "status": status,
            "rules": rules, "telemetry": telemetry, "console": console,
            "citus": citus, "backup": backup, "restore": restore, "fleet": fleet,
            "hunt": hunt, "intel": intel}


def main(argv: list[str] | None = None) -> int:
    try:  # the parser too: Ctrl-C reached it while it was being built (CI, stop 74)
        args, extra = build_parser().parse_known_args(argv)
        if extra and args.command != "dbshell" and getattr(args, "action", None) != "sql":
            build_parser().error(f"unrecognized arguments: {' '.join(extra)}")
        args.psql_args = extra
        settings = load_settings()
        configure_logging(settings.log_config)
        for warning in unrecognised_settings():
            log.warning("%s", warning)
        return COMMANDS[args.command or "serve"](settings, args)
    except SettingsError as error:
        print(f"router-backend: {error}", file=sys.stderr)
        return 2
    except SchemaNotReady as error:
        print(f"router-backend: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `| head`
        return stdout_closed()
    except OSError as error:  # the database unreachable, the port taken, DATA_DIR in use ...
        print(f"router-backend: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the service's own handler is in place
        print("router-backend: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
