"""Quick versions of the fleet drills (bench/): graceful SIGTERM, SIGKILL at random
moments, PostgreSQL and SMTP outages, database faults of three kinds, hostile clients, router
agents through every fault. Each runs the real server process under load."""

from __future__ import annotations

import argparse
import asyncio
import socket
import time

import aiohttp
import pytest

from bench.agent_drill import agent_drill
from bench.agent_drill import report as agent_report
from bench.backup_drill import backup_drill
from bench.backup_drill import report as backup_report
from bench.citus_drill import citus_drill
from bench.citus_scale_drill import citus_scale_drill
from bench.citus_scale_drill import report as scale_report
from bench.crash_drill import crash_drill
from bench.fault_drill import fault_drill, report
from bench.fleet_drill import fleet_drill
from bench.fleet_hostile_drill import hostile_drill
from bench.hostile import hostile
from bench.intel_drill import intel_drill
from bench.interrupt_drill import interrupt_drill
from bench.postmaster_drill import postmaster_drill
from bench.interrupt_drill import report as interrupt_report
from bench.outage_drill import outage_drill
from bench.report_drill import report_drill
from bench.enforcement_week import enforcement_week
from bench.stall_drill import stall_round
from bench.two_servers import two_servers
from bench.worker_kill_drill import worker_kill_drill
from testkit.citus_cluster import citus_installed
from testkit.database import Sql
from testkit.server import ServerRunner
from testkit.telemetry import stored_count

pytestmark = pytest.mark.drill  # the bench drills, quick runs (README.md, "Tests")

UPLOADS, LINES, LINE_DELAY = 8, 20, 0.1


async def slow_body(number: int):
    for line in range(LINES):
        yield b'{"event_type": "alert", "flow_id": %d}\n' % (number * 1000 + line)
        await asyncio.sleep(LINE_DELAY)


async def test_sigterm_finishes_requests_in_progress_then_exits(database, tmp_path):
    server = ServerRunner(database, tmp_path, RULE_GENERATION_ENABLED="false").start()
    async with aiohttp.ClientSession() as session:
        async def upload(number: int) -> int:
            headers = {"X-ID": f"02:00:00:00:01:{number:02x}",
                       "Content-Type": "application/x-ndjson"}
            async with session.post(f"{server.url}/log/events", data=slow_body(number),
                                    headers=headers) as response:
                return (await response.json())["accepted"]

        uploads = [asyncio.create_task(upload(n)) for n in range(UPLOADS)]
        await asyncio.sleep(LINES * LINE_DELAY / 3)  # every body is a third sent
        started = time.monotonic()
        server.process.terminate()
        accepted = await asyncio.gather(*uploads)
        status = await asyncio.to_thread(server.process.wait, 30)
    assert accepted == [LINES] * UPLOADS
    assert status == 0 and time.monotonic() - started < 15
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    assert stored_count(Sql(database)) == UPLOADS * LINES
    log = server.log_tail(20_000)
    assert "finishing 8 requests in progress" in log
    # one access-log line per request, written out before the process ended
    assert log.count('"POST /log/events HTTP/1.1" 200') == UPLOADS
    assert '"02:00:00:00:01:07"' in log


async def test_crash_drill_quick(database, tmp_path):
    result = await crash_drill(database, tmp_path, kills=10, routers=20, seed=7,
                               up_seconds=(0.2, 1.0))
    assert result.check.ok, result.check
    assert result.unhunted == 0
    assert result.hunt_checked == result.ledger.records_acknowledged
    assert result.ledger.records_acknowledged > 0
    assert not result.ledger.server_errors()
    assert result.answered_after_last_restart > 0
    assert result.check.stored_rows >= result.ledger.records_acknowledged


async def test_worker_kill_drill_quick(database, tmp_path):
    result = await worker_kill_drill(database, tmp_path, kills=3, workers=2, routers=10,
                                     seed=3)
    assert result.check.ok, result.check
    assert result.ledger.records_acknowledged > 0
    assert not result.ledger.server_errors()
    assert result.supervisor_survived and result.answered_after_last_kill > 0
    assert len(result.replaced_in) == 3 and max(result.replaced_in) < 10
    # Only what the killed workers held fails: nothing waiting in their queues.
    assert result.ledger.connection_errors <= result.connections_held, result.ledger
    assert result.ok


async def test_outage_drill_quick(tmp_path):
    result = await outage_drill(tmp_path, routers=10, down_seconds=2, sends=3)
    statuses = {status for (path, status, _) in result.during_outage if path != "/api"}
    assert 503 in statuses and statuses <= {200, 503}, result.during_outage
    assert all(retry for (path, status, retry) in result.during_outage if status == 503)
    assert result.recovery_seconds <= 5
    assert result.ledger_ok and not result.fleet_server_errors
    assert result.smtp_refused == result.smtp_sent == 3
    assert result.smtp_delivered_after == 3
    assert result.ok


async def test_fault_drill_quick(tmp_path):
    """One round of each fault (connections terminated, PostgreSQL restarted, the network
    cut for longer than DB_TIMEOUT_SECONDS) under a fleet, generation and notifications."""
    result = await fault_drill(tmp_path, routers=20, rounds=1, interval=3,
                               terminate_seconds=2, cut_seconds=5, db_timeout=3,
                               settle_seconds=2)
    assert result.terminated > 0 and set(result.recovery) == {"terminate", "restart", "cut"}
    assert result.regenerated == 20 and not result.still_failing and not result.long_claims
    assert result.ledger_ok and not result.server_errors, result.ledger_summary
    assert result.notifications_acknowledged > 0 and not result.notifications_undelivered
    assert result.etags_changed > 0 and not result.stale_304
    assert result.probe.probes > 0 and not result.probe.stale, result.probe.examples
    assert all(n <= 3 for n in result.loop_warnings.values()), result.loop_warnings
    assert result.ok, report(result)


async def test_stalls_from_many_macs_of_one_address_do_not_hold_honest_uploads(database,
                                                                              tmp_path):
    """Issue 27, finding 9: 12 MACs of one address each stalling an upload held the
    ingestion pool; an honest upload waited 14.2 s. Small pool and timeouts, same shape."""
    result = await stall_round(database, tmp_path, 6, INGEST_DB_POOL_MAX="4",
                               INGEST_MAX_UPLOADS_PER_ADDRESS="2",
                               INGEST_BODY_IDLE_SECONDS="6")
    assert result.stalled == {408: 2, 429: 4}
    assert result.small_seconds < 2 and result.large_seconds < 2, result


async def test_two_servers_share_the_fleet_quick(database, tmp_path):
    result = await two_servers(database, tmp_path, seconds=12, routers=20)
    assert len(result.answers_by_server) == 2 and all(result.answers_by_server)
    assert result.leases_lost == 0
    assert result.queue_generations == sum(result.generated_by_server) > 0
    assert result.ledger_ok and not result.server_errors
    assert result.ok(expect_ticks=False)


async def test_hostile_drill_quick(database, tmp_path):
    """Every hostile case of issue 13 against the real server (timeouts shortened, bodies a
    fifth of the issue's sizes) while another router polls."""
    result = await hostile(database, tmp_path, stalls=25, scale=0.2,
                           INGEST_BODY_IDLE_SECONDS="2", HTTP_IDLE_TIMEOUT_SECONDS="2")
    assert all(case.ok for case in result.cases), result.report()
    assert not result.non_200 and result.polls > 20, result.report()
    assert result.worst_latency < 1.0, result.report()
    assert result.idle_in_transaction_after == 0
    assert result.stored_rows == result.acknowledged_rows == 60_000
    assert result.ok


async def test_agent_drill_quick(tmp_path):
    """Issue 25: two router agents tail rotating eve.json files while the service is
    SIGKILLed, PostgreSQL restarted, the network cut past the agents' timeout and an agent
    SIGKILLed: every line is stored exactly once and the agents apply the current rules."""
    result = await agent_drill(tmp_path, agents=2, rounds=1, cut_seconds=5)
    assert set(result.faults.values()) == {1} and len(result.faults) == 5
    assert result.written["alert"] > 0 and result.written["flow"] > 0 and result.rotations
    assert result.ok, agent_report(result)


async def test_backup_drill_quick(tmp_path):
    """Issue 43: a backup while 10 routers upload, restored onto a fresh DATA_DIR: every
    record acknowledged before it began is there once, and the restored service starts."""
    result = await backup_drill(tmp_path, routers=10, fill_seconds=6, after_seconds=1)
    assert result.records_before > 0 and result.rate_during > 0
    assert result.ok, backup_report(result)


def test_fleet_drill(database, tmp_path):
    """Issue 46: an attacker reported by 8 routers of 8 networks reaches every router at its
    next poll; one /24's crowd, young routers, the allowlist and a router's poll address
    list nothing; an operator's veto empties every router's list at its next poll."""
    checks = fleet_drill(database, tmp_path, routers=30)
    assert all(passed for _, passed in checks), checks


def test_interrupt_drill_quick(tmp_path):
    """Issue 43: a SIGKILL at three points of a first start and three of an upgrade from 0001
    of a filled database (the service's process alone, or its group): each next start is clean
    and keeps every record."""
    result = interrupt_drill(tmp_path, points=3)
    assert len(result.rounds) == 6 and result.records > 1000
    assert result.ok, interrupt_report(result)


@pytest.mark.skipif(not citus_installed(), reason="the citus extension is not installed for "
                    "the PostgreSQL pg_config names (docs/scaling.md)")
async def test_citus_drill_quick(tmp_path):
    """A worker of a Citus cluster stopped and started under a fleet's uploads."""
    result = await citus_drill(tmp_path, routers=20, down_seconds=3)
    assert {status for (_, status, _) in result.away} == {503}, result.away
    assert all(retry for (_, _, retry) in result.away)
    assert {status for (_, status, _) in result.other} == {200}, result.other
    assert result.recovery_seconds <= 5
    assert result.ledger_ok and not result.fleet_server_errors, result.notes
    assert result.records_acknowledged > 0 and result.ok


@pytest.mark.skipif(not citus_installed(), reason="the citus extension is not installed for "
                    "the PostgreSQL pg_config names (docs/scaling.md)")
def test_citus_scale_drill_quick(tmp_path):
    """Issue 45: a worker added with `router-backend citus add-node` and the shards moved to
    it by `router-backend citus rebalance` in Citus's default mode under a fleet's uploads:
    no request fails, the others' p99 stays within 2x, every record is stored once."""
    tmp_path.chmod(0o755)  # the nodes run as the postgres user
    result = citus_scale_drill(tmp_path, argparse.Namespace(routers=10, shards=8, before=5))
    assert result.ok, scale_report(result)


def test_fleet_hostile_drill(database, tmp_path):
    """Issue 50: each bypass of the fleet's consensus tried by hostile members against the
    running service lists nothing, and the real attacker is still listed everywhere."""
    checks = hostile_drill(database, tmp_path, honest=6, flood=600)
    assert all(passed for _, passed in checks), checks


async def test_intel_drill_quick(database, tmp_path):
    result = await intel_drill(database, tmp_path, routers=20, live_timeout=120, fresh=2000)
    assert result.ok, result.failures
    # 6 of the established fleet, 2,000 of the fresh MACs (the C2 they saw); the heir and its
    # forebear are told none of theirs, the fresh MACs have no owner
    assert result.sightings == 2006 and result.notifications == 4 and result.emails == 3
    assert result.polls > 0
    assert result.live_seconds is not None


async def test_report_drill_quick(database, tmp_path):
    result = await report_drill(database, tmp_path, routers=60)
    assert result.ok, result.failures
    assert result.emails_first == 30 and result.emails_second == 60
    assert result.figures_checked == 60


@pytest.mark.parametrize("workers", [1, 2])
async def test_postmaster_drill_quick(tmp_path, workers):
    result = await postmaster_drill(tmp_path, kills=2, routers=6, workers=workers)
    assert result.ok, (result.back_after, result.slowest, result.statuses, result.late_503s,
                      result.check)
    assert result.ledger.records_acknowledged > 0


async def test_enforcement_week_quick(database, tmp_path):
    result = await enforcement_week(database, tmp_path, routers=400)
    assert result.ok, result.failures
    assert result.reports == 400 * 7 + 130
    assert 0 < result.stored_bytes_per_router_day < 10_000
