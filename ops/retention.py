"""`router-backend retention`: the retention job once now (whatever DATA_RETENTION_ENABLED
says: an operator asked), exclusively with the scheduled runs; one line per kind of
record removed."""

from __future__ import annotations

import argparse

from ops.command import Command, CommandError, no_arguments, run_command
from server.db.pool import Database
from server.jobs.cron import run_job
from server.jobs.retention import run_retention
from server.settings import Settings
from server.telemetry.summary import summaries_kept

# What each table holds, and which of the job's cutoffs it was cut at.
KINDS = (("telemetry_chunks", "telemetry chunks", "cutoff"),
         ("telemetry_alerts", "alert summaries", "summary_cutoff"),
         ("telemetry_flows", "flow summaries", "summary_cutoff"),
         ("telemetry_alert_days", "packed days of alert summaries", "packed_summary_cutoff"),
         ("telemetry_flow_days", "packed days of flow summaries", "packed_summary_cutoff"),
         ("activations", "activations", "activation_cutoff"),
         ("activation_days", "activation days", "activation_cutoff"),
         ("hunt_postings", "hunt index", "hunt_cutoff"))


def _print_removed(detail: dict) -> None:
    for table, label, cutoff in KINDS:
        removed = detail["removed"][table]
        dropped = removed["partitions_dropped"]
        print(f"retention: {label} before {detail[cutoff]}: {len(dropped)} partitions dropped "
              f"(about {removed['rows_in_dropped_partitions_estimate']} rows), "
              f"{removed['rows_deleted']} rows deleted")
        if removed["partitions_deferred"]:
            print(f"retention: {label}: {', '.join(removed['partitions_deferred'])} left "
                  "for the next run (uploads kept the table busy)")


def retention(settings: Settings, args: argparse.Namespace) -> int:
    async def body(settings: Settings, db: Database) -> int:
        outcome = await run_job(db, "retention", lambda: run_retention(
            db, settings.retention_days, settings.activation_retention_days,
            hunt_days=settings.hunt_retention_days,
            summaries_kept=summaries_kept(settings)))
        if outcome.status != "succeeded":
            raise CommandError(outcome.error or "another retention run is in progress")
        _print_removed(outcome.detail)
        return 0
    return run_command("router-backend retention", body, settings=settings)


COMMAND = Command("retention", "delete telemetry older than RETENTION_DAYS and activations "
                  "older than ACTIVATION_RETENTION_DAYS, now", no_arguments, retention)
