"""The first ruleset of a fresh install: published soon after start-up rather than at the
preprocess job's first weekly tick, so routers registering meanwhile get IDS payloads.

Every process that runs jobs starts this; the job's advisory lock lets one of them run it
while the others wait and look again. A failure (the archive unreachable ...) is logged in
one line and retried with backoff, from 30 s doubling up to JOB_RETRY_DELAY_SECONDS, until a
ruleset is published by anyone (this loop, a scheduled tick, or an operator's
`rulepreprocess`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from ruledata.workspace import Workspace
from server.db.pool import Database, DatabaseUnavailable
from server.jobs.cron import JobFunction, run_job
from server.metrics import Metrics

log = logging.getLogger("router_backend.jobs")

START_DELAY_SECONDS = 1.0   # let start-up finish first
FIRST_RETRY_SECONDS = 30
ELSEWHERE_POLL_SECONDS = 5  # another process is running the job: look again this soon


def published(rule_data_dir: Path) -> bool:
    return Workspace(rule_data_dir).current_version_dir() is not None


async def publish_first_ruleset(db: Database, rule_data_dir: Path, preprocess: JobFunction,
                                max_delay: float, metrics: Metrics) -> None:
    await asyncio.sleep(START_DELAY_SECONDS)
    delay = min(FIRST_RETRY_SECONDS, max_delay)
    while not published(rule_data_dir):
        try:
            outcome = await run_job(db, "rulepreprocess", preprocess, log_failure=False)
        except DatabaseUnavailable as error:
            log.warning("no ruleset published yet: database unavailable (%s); next attempt "
                        "in %gs", error, delay)
        else:
            metrics.job_runs.labels("rulepreprocess", outcome.status).inc()
            if outcome.status == "succeeded":
                log.info("first ruleset published: %s", outcome.detail.get("version"))
                return
            if outcome.status == "skipped":
                await asyncio.sleep(ELSEWHERE_POLL_SECONDS)
                continue
            log.warning("no ruleset published yet: preprocess failed (%s); next attempt in "
                        "%gs", outcome.error, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)
