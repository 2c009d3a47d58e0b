"""The fleet at a glance, as `router-backend status` prints it and the console's fleet page
shows it: the database's part (server/db/status.py) and the ruleset in use."""

from __future__ import annotations

from ruledata.workspace import Workspace
from server.db.pool import Database
from server.db.status import fleet_status as database_status
from server.settings import Settings


def ruleset_status(settings: Settings) -> dict | None:
    current = Workspace(settings.rule_data_path).current_ruleset()
    if current is None:
        return None
    return {"version": current.version, "published_at": current.published_at,
            "age_hours": round(current.age_seconds / 3600, 1)}


async def fleet_status(db: Database, settings: Settings) -> dict:
    return {**await database_status(db), "ruleset": ruleset_status(settings)}
