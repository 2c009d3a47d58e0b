"""The fleet at a glance, as `router-backend status` prints it and the console's fleet page
shows it: the shared tables' part (server/db/status.py), each capability's own and the
ruleset in use."""

from __future__ import annotations

from ruledata.workspace import Workspace
from server.db.pool import Database
from server.db.status import runs_last_hour, shared_status
from server.generation.status import applied_status, queue_status
from server.hunt.status import hunt_status
from server.notify.sql import status_counts as notification_counts
from server.settings import Settings
from server.timestamps import cron_interval_seconds


def ruleset_status(settings: Settings) -> dict | None:
    current = Workspace(settings.rule_data_path).current_ruleset()
    if current is None:
        return None
    return {"version": current.version, "published_at": current.published_at,
            "age_hours": round(current.age_seconds / 3600, 1)}


async def fleet_status(db: Database, settings: Settings) -> dict:
    return {**await shared_status(db), "applied": await applied_status(db),
            "generation_queue": await queue_status(db),
            "notifications": await notification_counts(db),
            "hunt_index": await hunt_status(db), "ruleset": ruleset_status(settings),
            "intel_match": await runs_last_hour(
                db, "intel-match", cron_interval_seconds(settings.intel_match_cron_schedule))}
