"""Operators in control (issue 16): a fresh install publishes its first ruleset soon after
start-up (retrying while the archive is unreachable), /health says which ruleset is in use
and how old it is, and a cron tick missed while the service was down runs at the next
start."""

from __future__ import annotations

import pytest

import asyncio
import shutil
from datetime import datetime, timedelta, timezone

import aiohttp

from testkit.rule_archives import ruleset_settings
from testkit.server import ServerRunner
from testkit.waiting import wait_for

ROUTER = "aa:bb:cc:00:16:01"


def server_for(database, settings, tmp_path, **extra: str) -> ServerRunner:
    """The real server on the fixture ruleset's feed, preprocessing at start-up."""
    return ServerRunner(database, tmp_path, **{
        "RULE_PREPROCESS_AT_START": "true", "RULE_DATA_DIR": str(settings.rule_data_path),
        "RULE_PREPROCESS_ARCHIVE_URL": settings.rule_preprocess_archive_url,
        "RULE_PREPROCESS_VERSION_URL": settings.rule_preprocess_version_url,
        "RULE_GENERATION_SAMPLE_COUNT": "6", "RULE_GENERATION_FIRED_PERCENT": "100",
        "RULE_GENERATION_POLL_SECONDS": "1", "JOB_RETRY_DELAY_SECONDS": "1", **extra})


async def get_json(session, url: str) -> tuple[int, dict]:
    async with session.get(url, headers={"X-ID": ROUTER}) as response:
        return response.status, await response.json()


@pytest.mark.drill  # a whole first start, ruleset and generation
async def test_fresh_install_serves_ids_payloads_without_an_operator(database, tmp_path, sql):
    settings = ruleset_settings("fixture", database, tmp_path)
    archive = settings.rule_preprocess_archive_url.removeprefix("file://")
    hidden = archive + ".away"
    shutil.move(archive, hidden)  # the archive is unreachable at first
    server = server_for(database, settings, tmp_path).start()
    try:
        async with aiohttp.ClientSession() as session:
            status, health = await get_json(session, f"{server.url}/health")
            assert status == 200 and health["ruleset"] is None
            assert (await get_json(session, f"{server.url}/rules/ids"))[0] == 404

            async def failures():
                return sql.value("SELECT count(*) FROM job_runs WHERE status = 'failed' "
                                 "AND job = 'rulepreprocess'") >= 2
            await wait_for(failures, timeout=60)  # retried while unreachable
            shutil.move(hidden, archive)

            async def payload():
                status, body = await get_json(session, f"{server.url}/rules/ids")
                return body if status == 200 else None
            ids = await wait_for(payload, timeout=60)
            assert ids["version"] == "fixture" and ids["rule_count"] > 0
            status, health = await get_json(session, f"{server.url}/health")
            assert health["ruleset"]["version"] == "fixture"
            assert 0 <= health["ruleset"]["age_seconds"] < 120
    finally:
        server.stop()
    log = server.log_tail(50_000)
    failed = [line for line in log.splitlines() if "no ruleset published yet" in line]
    assert failed and all("next attempt in" in line for line in failed)
    assert "Traceback" not in log  # each failure is one line
    assert "first ruleset published: fixture" in log
    assert sql.rows("SELECT status FROM job_runs WHERE job = 'rulepreprocess' "
                    "ORDER BY id")[-1] == ("succeeded",)


async def test_a_missed_tick_runs_once_at_the_next_start(database, tmp_path, sql):
    settings = ruleset_settings("fixture", database, tmp_path)
    # The database was installed well before last night's tick (every night at 03:00 UTC),
    # the last claimed tick is older: the process was down at 03:00.
    sql.rows("UPDATE _yoyo_migration SET applied_at_utc = applied_at_utc - interval '3 days'")
    now = datetime.now(timezone.utc)
    sql.rows("INSERT INTO job_ticks (job, tick, claimed_by) VALUES ('rulepreprocess', %s, 'x')",
             (now - timedelta(days=2),))
    # Two hosts (a DATA_DIR each) on one database: the missed tick runs once.
    servers = [server_for(database, settings, tmp_path / f"host-{n}",
                          RULE_PREPROCESS_AT_START="false",
                          RULE_PREPROCESS_CRON_SCHEDULE="0 3 * * *").start()
               for n in range(2)]
    try:
        async def ran():
            return sql.value("SELECT count(*) FROM job_runs WHERE status = 'succeeded' "
                             "AND job = 'rulepreprocess'")
        await wait_for(ran, timeout=60)
        await asyncio.sleep(2)
    finally:
        for server in servers:
            server.stop()
    expected = now.replace(hour=3, minute=0, second=0, microsecond=0)
    if expected > now:
        expected -= timedelta(days=1)
    assert sql.rows("SELECT tick FROM job_ticks WHERE job = 'rulepreprocess' "
                    "ORDER BY tick")[-1][0] == expected
    assert sql.value("SELECT count(*) FROM job_runs WHERE job = 'rulepreprocess'") == 1
    assert "was missed while the service was down" in "".join(
        server.log_tail(20_000) for server in servers)
