"""Which jobs a server process schedules, and on which cron specs, from the settings."""

from __future__ import annotations

from datetime import timedelta

from server.db.pool import Database
from server.hunt.packing import pack
from server.jobs.cron import CronJobs, JobFunction
from server.jobs.activation_days import ACTIVATION_DAYS_CRON_SCHEDULE, roll_up_activations
from server.fleet.config import FleetConfig
from server.fleet.job import run_fleet
from server.jobs.first_ruleset import publish_first_ruleset, published
from server.jobs.preprocess import run_preprocess
from server.jobs.partitions import PARTITIONS_CRON_SCHEDULE, create_partitions_ahead
from server.jobs.retention import run_retention
from server.jobs.upload_keys import UPLOAD_KEYS_CRON_SCHEDULE, expire_upload_keys
from server.metrics import Metrics
from server.settings import Settings
from server.hunt.sql import UNREAD_UPLOAD
from server.telemetry.compaction import compact
from server.telemetry.summary import summaries_kept


async def _packed(db: Database) -> dict:
    return (await pack(db)).as_detail()


def scheduled_jobs(db: Database, settings: Settings, metrics: Metrics,
                   more: list[tuple[str, str, JobFunction]] = ()) -> CronJobs:
    """Rule preprocessing unless its schedule is `off` (and at once when no ruleset was ever
    published); time
    partitions created ahead and expired upload keys deleted every hour; small telemetry
    chunks merged on TELEMETRY_COMPACT_CRON_SCHEDULE; the hunt index's past days packed on
    HUNT_COMPACT_CRON_SCHEDULE; activations older than a week rolled up
    by day every hour; the fleet's lists on FLEET_CRON_SCHEDULE (FLEET_ENABLED); retention when
    DATA_RETENTION_ENABLED is true; `more` (name, cron spec, function), the jobs of the
    capabilities above this one (threat intelligence, the owners' reports); a tick missed while the service was down runs once at
    start-up."""
    jobs = CronJobs(db, settings.job_retry_delay_seconds, settings.job_retry_attempts, metrics)

    async def rule_preprocess() -> dict:
        return (await run_preprocess(settings, start_method="spawn")).as_detail()

    async def retention() -> dict:
        return await run_retention(db, settings.retention_days,
                                   settings.activation_retention_days,
                                   hunt_days=settings.hunt_retention_days,
                                   summaries_kept=summaries_kept(settings))

    async def partitions() -> dict:
        return await create_partitions_ahead(db, settings.telemetry_partition_days)

    if settings.rule_preprocess_cron_schedule:  # "" when off
        jobs.add("rulepreprocess", settings.rule_preprocess_cron_schedule, rule_preprocess)
    async def telemetry_compaction() -> dict:
        return (await compact(db, settings.telemetry_chunk_records,
                              timedelta(seconds=settings.telemetry_compact_settle_seconds),
                              UNREAD_UPLOAD,
                              fleet_window=timedelta(hours=settings.fleet_window_hours))
                ).as_detail()

    async def expired_upload_keys() -> dict:
        return await expire_upload_keys(db, settings.ingest_idempotency_key_days)

    jobs.add("partitions", PARTITIONS_CRON_SCHEDULE, partitions)
    jobs.add("upload-keys", UPLOAD_KEYS_CRON_SCHEDULE, expired_upload_keys)
    jobs.add("telemetry-compact", settings.telemetry_compact_cron_schedule,
             telemetry_compaction)
    jobs.add("hunt-compact", settings.hunt_compact_cron_schedule,
             lambda: _packed(db))
    jobs.add("activation-days", ACTIVATION_DAYS_CRON_SCHEDULE,
             lambda: roll_up_activations(db))
    if settings.fleet_enabled:
        fleet = FleetConfig.from_settings(settings)
        jobs.add("fleet", settings.fleet_cron_schedule, lambda: run_fleet(db, fleet, metrics))
    if settings.data_retention_enabled:
        jobs.add("retention", settings.retention_cron_schedule, retention)
    for name, schedule, function in more:
        jobs.add(name, schedule, function)
    jobs.catch_up()
    if first_download_at_start(settings):
        jobs.spawn(publish_first_ruleset(db, settings.rule_data_path, rule_preprocess,
                                         settings.job_retry_delay_seconds, metrics),
                   "first-ruleset")
    return jobs


def first_download_at_start(settings: Settings) -> bool:
    """Whether the service downloads the ruleset soon after start-up: none published yet,
    RULE_PREPROCESS_AT_START, and its schedule not `off`."""
    return (settings.rule_preprocess_at_start and bool(settings.rule_preprocess_cron_schedule)
            and not published(settings.rule_data_path))
