"""The reports' scheduled job (server/jobs/schedule.py runs it): every hour by default, each
owner's weekly report whose moment has come (weekly.py); and the signatures' names they
give."""

from __future__ import annotations

import logging
from pathlib import Path

from engine.ruleset import signature_names
from ruledata.workspace import Workspace
from server.db.pool import Database
from server.reports.weekly import send_weekly_reports
from server.settings import Settings

log = logging.getLogger("router_backend.reports")


class SignatureNames:
    """The published ruleset's signature messages, read when first asked for and again when
    another ruleset is published; none before the first ruleset or when it cannot be read (a
    report names a signature by its number then). Called in a thread: reading a ruleset
    takes a second or so."""

    def __init__(self, rule_data: Path):
        self._workspace = Workspace(rule_data)
        self._read: tuple[Path, dict[int, str]] | None = None

    def __call__(self) -> dict[int, str]:
        version = self._workspace.current_version_dir()
        if version is None:
            return {}
        if self._read is None or self._read[0] != version:
            try:
                self._read = (version, signature_names(version))
            except (OSError, ValueError, KeyError) as error:
                log.warning("signatures are named by number: the ruleset %s could not be "
                            "read (%s)", version, error)
                return {}
        return self._read[1]


def report_jobs(db: Database, settings: Settings) -> list[tuple]:
    """(name, cron spec, function) of each reports job; none when it is `off`."""
    if not settings.weekly_reports_cron_schedule:
        return []
    names = SignatureNames(settings.rule_data_path)
    return [("weekly-reports", settings.weekly_reports_cron_schedule,
             lambda: send_weekly_reports(db, names))]
