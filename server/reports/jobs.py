"""The reports' scheduled job (server/jobs/schedule.py runs it): every hour by default, each
owner's weekly report whose moment has come (weekly.py)."""

from __future__ import annotations

import logging
from pathlib import Path

from engine.ruleset import signature_names
from ruledata.workspace import Workspace
from server.db.pool import Database
from server.reports.weekly import Names, send_weekly_reports
from server.settings import Settings

log = logging.getLogger("router_backend.reports")


def names_from(rule_data: Path) -> Names:
    """The published ruleset's signature messages, read when called; none before the first
    ruleset or when it cannot be read (a report names a signature by its number then)."""
    def names() -> dict[int, str]:
        version = Workspace(rule_data).current_version_dir()
        if version is None:
            return {}
        try:
            return signature_names(version)
        except (OSError, ValueError, KeyError) as error:
            log.warning("the weekly reports name signatures by number: the ruleset %s "
                        "could not be read (%s)", version, error)
            return {}
    return names


def report_jobs(db: Database, settings: Settings) -> list[tuple]:
    """(name, cron spec, function) of each reports job; none when it is `off`."""
    if not settings.weekly_reports_cron_schedule:
        return []
    names = names_from(settings.rule_data_path)
    return [("weekly-reports", settings.weekly_reports_cron_schedule,
             lambda: send_weekly_reports(db, names))]
