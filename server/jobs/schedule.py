"""Which jobs a server process schedules, and on which cron specs, from the settings."""

from __future__ import annotations

from server.db.pool import Database
from server.jobs.cron import CronJobs
from server.jobs.preprocess import run_preprocess
from server.jobs.retention import run_retention
from server.metrics import Metrics
from server.settings import Settings


def scheduled_jobs(db: Database, settings: Settings, metrics: Metrics) -> CronJobs:
    """Rule preprocessing always; retention when DATA_RETENTION_ENABLED is true."""
    jobs = CronJobs(db, settings.job_retry_delay_seconds, settings.job_retry_attempts, metrics)

    async def rule_preprocess() -> dict:
        return (await run_preprocess(settings, start_method="spawn")).as_detail()

    async def retention() -> dict:
        return await run_retention(db, settings.retention_days,
                                   settings.activation_retention_days)

    jobs.add("rulepreprocess", settings.rule_preprocess_cron_schedule, rule_preprocess)
    if settings.data_retention_enabled:
        jobs.add("retention", settings.retention_cron_schedule, retention)
    return jobs
