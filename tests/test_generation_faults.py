"""Every generation outcome ends its claim (issue 24): an exception from the engine, or the
database going away in the middle, reschedules the router with backoff and `last_error`,
and it is generated again; no claim outlives its generation by more than one lease."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from engine.pool import WorkerPool
from server.routers import sql as router_db
from server.db.lifecycle import open_database
from server.generation import sql as queue
from server.generation import service as service_module
from server.generation.service import GenerationConfig, GenerationService
from server.db.connect import connect_async
from server.generation.sql import LeaseLost, renew_and_summarise
from server.generation.task import generate_and_store
from server.jobs.preprocess import run_preprocess
from testkit.rule_archives import ruleset_settings
from testkit.tcp_proxy import TcpProxy
from testkit.workers import pool_worker_pids
from testkit.waiting import wait_for

MAC = "aa:bb:cc:00:00:24"
_CALLS = {"count": 0}


def failing_first_time(task):
    """The pool's function: raises on its first call in this worker, then generates."""
    _CALLS["count"] += 1
    if _CALLS["count"] == 1:
        raise RuntimeError("engine exploded on purpose")
    return generate_and_store(task)


def slow_generation(task):
    """Gives the test time to cut the database in the middle of a generation."""
    time.sleep(2)
    return generate_and_store(task)


def queue_row(sql) -> dict:
    columns = ("claimed_by", "attempts", "last_error", "generation_count", "lease_left")
    row = sql.rows("SELECT claimed_by, attempts, last_error, generation_count, "
                   "extract(epoch FROM claimed_until - now()) FROM generation_queue "
                   "WHERE mac = %s", (MAC,))[0]
    return dict(zip(columns, row))


async def run_service(settings, function, until, timeout: float = 60):
    await run_preprocess(settings)
    config = GenerationConfig.from_settings(settings)
    pool = WorkerPool(function, 1, 60)
    async with open_database(settings) as db:
        await router_db.register(db, MAC)
        service = GenerationService(db, pool, config)
        service.start()
        try:
            return await until(service)
        finally:
            await service.stop(grace_seconds=10)
            pool.close(wait=False)


def fast_settings(database, tmp_path):
    # A 2 s interval makes the backoff 2 s (it is never longer than the interval).
    return ruleset_settings("fixture", database, tmp_path).replace(
        rule_generation_interval_seconds=2)


async def test_engine_exception_reschedules_with_last_error(database, tmp_path, sql):
    settings = fast_settings(database, tmp_path)
    failures = []

    async def failed_then_generated(service):
        async def failed():
            row = queue_row(sql)
            if row["last_error"]:
                failures.append(row)
            return row["last_error"]
        await wait_for(failed, timeout=60, interval=0.05)

        async def generated():  # stored by the worker, then counted by the event loop
            return queue_row(sql)["generation_count"] == 1 and service.generated == 1
        await wait_for(generated, timeout=60)
        return service.generated

    assert await run_service(settings, failing_first_time, failed_then_generated) == 1
    first = failures[0]
    assert first["last_error"] == "RuntimeError: engine exploded on purpose"
    assert first["attempts"] == 1 and first["claimed_by"] is None
    row = queue_row(sql)
    assert row["attempts"] == 0 and row["last_error"] is None


@pytest.fixture
async def proxied_settings(database, tmp_path):
    proxy = await TcpProxy(database.host, database.port).start()
    location = proxy.location(database)
    settings = fast_settings(location, tmp_path).replace(db_timeout_seconds=2)
    yield settings, proxy
    await proxy.close()


@pytest.mark.drill  # the database cut and restarted
@pytest.mark.parametrize("fault", ["server gone", "network cut"])
async def test_database_lost_mid_generation_reschedules_once_it_is_back(
        proxied_settings, sql, monkeypatch, fault):
    """The server gone closes the worker's connection; a network cut closes nothing and
    answers nothing, so the worker's wait for its statement must end by itself (db_timeout),
    not by the command timeout killing it."""
    settings, proxy = proxied_settings
    monkeypatch.setattr(service_module, "RENEW_SECONDS", 0.5)
    seen = {}

    async def cut_then_restored(service):
        async def generated(count: int):
            return queue_row(sql)["generation_count"] == count

        async def generating():
            return MAC in service._running
        await wait_for(lambda: generated(1), timeout=60)  # the worker is connected
        await wait_for(generating, timeout=60, interval=0.05)
        workers = pool_worker_pids()
        proxy.go_down() if fault == "server gone" else proxy.cut()

        async def failure_kept():
            return MAC in service._unrecorded
        await wait_for(failure_kept, timeout=30, interval=0.05)
        seen["while_down"] = queue_row(sql)  # read directly, not through the proxy
        proxy.come_back() if fault == "server gone" else proxy.restore()

        async def recorded():
            row = queue_row(sql)
            return row if row["last_error"] else None
        seen["recorded"] = await wait_for(recorded, timeout=30, interval=0.05)
        await wait_for(lambda: generated(2), timeout=60)
        assert pool_worker_pids() == workers  # no worker killed for a timeout

    await run_service(settings, slow_generation, cut_then_restored)
    while_down = seen["while_down"]
    # Not renewed once its generation ended: the claim runs out within one lease.
    assert while_down["claimed_by"] is not None and while_down["last_error"] is None
    assert while_down["lease_left"] <= service_module.CLAIM_LEASE.total_seconds()
    recorded = seen["recorded"]
    assert recorded["last_error"].startswith("DatabaseUnavailable"), recorded
    assert recorded["attempts"] >= 1
    row = queue_row(sql)
    assert row["last_error"] is None and row["claimed_by"] is None


async def test_a_worker_statement_delivered_after_the_failure_was_recorded_claims_nothing(
        database, tmp_path, sql):
    """A network that holds a worker's first statement through a cut delivers it after the
    worker gave up and the failure was recorded (a CI run saw it): it must not take the
    router back for another lease, or the router waits that lease before it is retried."""
    owner, lease = "server@test", service_module.CLAIM_LEASE
    async with open_database(fast_settings(database, tmp_path)) as db:
        await router_db.register(db, MAC)
        assert await queue.claim_due(db, owner, 10, lease) == [MAC]
        await queue.fail(db, owner, MAC, timedelta(seconds=2), "DatabaseUnavailable: cut")
    async with await connect_async(database, 5) as conn, conn.cursor() as cur:
        with pytest.raises(LeaseLost):  # the held statement, late
            await renew_and_summarise(cur, owner, MAC, lease, timedelta(days=1), 2)
    row = queue_row(sql)
    assert row["claimed_by"] is None and row["last_error"] == "DatabaseUnavailable: cut"
