"""The owners' marks' scheduled job (server/jobs/schedule.py runs it): every value owners
marked or hold judged again, every HOLDS_CRON_SCHEDULE."""

from __future__ import annotations

from server.db.pool import Database
from server.feedback.config import FeedbackConfig
from server.feedback.marks import rejudged
from server.settings import Settings

HOLDS_CRON_SCHEDULE = "*/10 * * * *"


def feedback_jobs(db: Database, settings: Settings) -> list[tuple]:
    """(name, cron spec, function) of each job of the owners' marks."""
    config = FeedbackConfig.from_settings(settings)
    return [("false-positive-holds", HOLDS_CRON_SCHEDULE, lambda: rejudged(db, config))]
