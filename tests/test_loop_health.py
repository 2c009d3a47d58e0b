"""Each long-running loop survives the database going away and coming back: one warning per
outage (not one per attempt), back by itself, and its last success on /metrics (issue 24)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from server import background
from server.generation import service as generation_service
from server.ingest import tally as telemetry_tally
from server.jobs.preprocess import run_preprocess
from server.metrics import Metrics
from testkit.rule_archives import ruleset_settings
from testkit.tcp_proxy import TcpProxy
from testkit.waiting import wait_for
from tests.test_metrics import scrape

# The loops of a lone process (role "all"); jobs run on their cron ticks, not within a test.
LOOPS = ("generation-dispatch", "generation-renew", "change-feed", "telemetry-tally",
         "notification-retries")
LAST_SUCCESS = "background_loop_last_success_timestamp_seconds"


def test_one_warning_per_outage_and_one_when_it_works_again(caplog, monkeypatch):
    metrics = Metrics()
    health = metrics.loop_health("example", logging.getLogger("test.loop"))

    def last_success() -> float:
        return metrics.registry.get_sample_value(LAST_SUCCESS, {"loop": "example"})
    started = last_success()
    assert started > 0  # a loop that never works is seen as stopped from its start
    with caplog.at_level(logging.INFO, logger="test.loop"):
        for attempt in range(50):
            health.failed(ConnectionError(f"attempt {attempt}"))
        assert health.failing and health.failures == 50
        time.sleep(0.01)
        health.succeeded()
        health.succeeded()
        for _ in range(5):  # flapping (connections terminated again and again): same outage
            health.failed("flap")
            health.succeeded()
        monkeypatch.setattr(background, "FLAP_SECONDS", 0.0)
        health.failed("again")  # a new outage
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "example: attempt 0; retrying quietly until it works again",
        lines[1],
        "example: again; retrying quietly until it works again"]
    assert lines[1].startswith("example: working again after") and "(50 attempts failed)" \
        in lines[1]
    assert last_success() > started and health.outages == 2


def loop_successes(samples: dict) -> dict[str, float]:
    return {dict(labels)["loop"]: value for (name, labels), value in samples.items()
            if name == LAST_SUCCESS}


@pytest.fixture
async def proxied(database, tmp_path):
    proxy = await TcpProxy(database.host, database.port).start()
    location = proxy.location(database)
    yield location, proxy
    await proxy.close()


async def test_every_loop_logs_an_outage_once_and_resumes(proxied, tmp_path, make_client,
                                                         monkeypatch, caplog):
    location, proxy = proxied
    monkeypatch.setattr(generation_service, "RENEW_SECONDS", 0.5)
    monkeypatch.setattr(telemetry_tally, "FLUSH_SECONDS", 0.5)
    settings = ruleset_settings("fixture", location, tmp_path).replace(
        rule_generation_enabled=True, rule_generation_interval_seconds=2,
        db_timeout_seconds=1, notification_retry_seconds=1)
    await run_preprocess(settings)
    client = await make_client(settings)
    assert (await client.get("/rules/last_updated", headers={"X-ID": "aa:bb:cc:24:00:01"})
            ).status == 200
    before = loop_successes(await scrape(client))
    assert set(LOOPS) <= set(before), before

    with caplog.at_level(logging.INFO):
        proxy.go_down()
        await asyncio.sleep(6)  # several attempts of every loop
        down_at_most = time.time()
        proxy.come_back()

        async def all_back() -> bool:
            now = loop_successes(await scrape(client))
            return all(now[loop] > down_at_most for loop in LOOPS)
        await wait_for(all_back, timeout=40, interval=0.5)

    for loop in LOOPS:
        started = [r for r in caplog.records
                   if r.getMessage().startswith(f"{loop}: ") and "retrying quietly" in
                   r.getMessage()]
        back = [r for r in caplog.records
                if r.getMessage().startswith(f"{loop}: working again")]
        assert len(started) <= 1 and len(back) == len(started), (loop, started, back)
    # The loops that meet the outage on their own schedule all did.
    for loop in ("generation-dispatch", "change-feed", "notification-retries"):
        assert any(r.getMessage().startswith(f"{loop}: working again") for r in caplog.records)
