"""Generation through the queue, the pool and the command, on the real database."""

from __future__ import annotations

import asyncio
import gzip
import io
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from suricata.update import rule as peer

from engine.pool import WorkerFailed, WorkerPool
from ruledata.parser import FLOWBIT_CHECKS, FLOWBIT_SETS
from server.routers import sql as router_db
from server.db.lifecycle import open_database
from server.generation import sql as queue
from server.generation.service import (
    CLAIM_LEASE,
    GenerationConfig,
    GenerationService,
    generation_pool,
)
from server.jobs.preprocess import run_preprocess
from testkit import CORPUS
from testkit.database import command_env
from testkit.payloads import unpack
from testkit.rule_archives import ruleset_settings
from testkit.waiting import wait_for
from testkit.workers import pool_worker_pids
from tests.commands import run_program

MAC = "aa:bb:cc:00:00:44"


def fixture_alerts() -> bytes:
    records = [{"timestamp": "2026-03-02T10:00:00+00:00", "event_type": "alert",
                "src_ip": "203.0.113.77", "src_port": 4000 + n, "dest_ip": "192.168.1.2",
                "dest_port": 22, "proto": "TCP", "alert": {"signature_id": sid, "severity": 1}}
               for n, sid in enumerate([9000001, 9000003, 9000008, 9000004])]
    return b"\n".join(orjson.dumps(r) for r in records)


def corpus_telemetry() -> tuple[bytes, bytes]:
    alerts, flows = [], []
    for path in sorted((CORPUS / "eve").glob("*.json")):
        for line in path.read_bytes().splitlines():
            if line.strip():
                kind = orjson.loads(line).get("event_type")
                (alerts if kind == "alert" else flows if kind == "flow" else []).append(line)
    return b"\n".join(alerts), b"\n".join(flows)


@pytest.fixture(params=["fixture", "corpus"])
def published(request, database, tmp_path):
    return request.param, ruleset_settings(request.param, database, tmp_path)


@pytest.fixture
def fixture_settings(database, tmp_path):
    return ruleset_settings("fixture", database, tmp_path)


async def publish(settings):
    await run_preprocess(settings)


def rulegen(settings, mac: str) -> subprocess.CompletedProcess:
    return run_program("ops.rulegen", command_env(settings), "--mac", mac)


def stored_payloads(sql) -> tuple[dict, dict, object]:
    ids_gz, firewall_gz, ids_at = sql.rows(
        "SELECT ids_payload_gz, firewall_payload_gz, ids_updated_at FROM router_rules")[0]
    return unpack(bytes(ids_gz)), unpack(bytes(firewall_gz)), ids_at


def assert_payload_sound(ids: dict, fired_enabled: set[int]) -> None:
    parsed = [peer.parse(r["raw"]) for r in ids["rules"]]
    assert all(p is not None and p.enabled for p in parsed)  # each parses back as a rule
    assert [p.sid for p in parsed] == [r["sid"] for r in ids["rules"]]
    assert fired_enabled <= {p.sid for p in parsed}
    set_bits, checked = set(), set()
    for p in parsed:
        for value in p.flowbits:
            command, _, names = value.partition(",")
            bits = {b.strip() for b in names.replace("&", "|").split("|") if b.strip()}
            if command in FLOWBIT_SETS:
                set_bits |= bits
            elif command in FLOWBIT_CHECKS:
                checked |= bits
    assert checked <= set_bits


async def test_rulegen_payloads(published, make_client, sql):
    kind, settings = published
    await publish(settings)
    client = await make_client(settings)
    headers = {"X-ID": MAC, "Content-Type": "application/x-ndjson"}
    if kind == "corpus":
        alerts, flows = corpus_telemetry()
        fired_enabled = {2018489, 2010935, 2010936, 2010937, 2010939, 2002910}
    else:
        alerts, flows = fixture_alerts(), b""
        fired_enabled = {9000001, 9000003, 9000008}  # 9000004 fired but is disabled
    assert (await client.post("/log/events", data=alerts, headers=headers)).status == 200
    if flows:
        assert (await client.post("/log/cfm", data=flows, headers=headers)).status == 200

    first = rulegen(settings, MAC)
    assert first.returncode == 0, first.stderr
    assert "IDS rules from ruleset" in first.stdout and "from its own alerts" in first.stdout
    ids, firewall, ids_at = stored_payloads(sql)
    assert_payload_sound(ids, fired_enabled)
    reasons = {r["sid"]: r["reason"] for r in ids["rules"]}
    assert all(reasons[sid] == "fired" for sid in fired_enabled)
    assert firewall["entry_count"] == len(firewall["entries"]) > 0
    rules_file = settings.rule_data_path / "idps_rules" / f"{MAC.replace(':', '-')}.rules.gz"
    text = gzip.decompress(rules_file.read_bytes()).decode()
    assert [line for line in text.splitlines()
            if line and not line.startswith("#")] == [r["raw"] for r in ids["rules"]]

    second = rulegen(settings, MAC)
    assert second.returncode == 0
    ids_again, firewall_again, ids_at_again = stored_payloads(sql)
    assert (ids_again, firewall_again) == (ids, firewall)
    assert ids_at_again == ids_at  # same content: updated_at does not move


async def test_rulegen_errors(settings, tmp_path):
    unknown = rulegen(settings, "aa:bb:cc:00:00:99")
    assert unknown.returncode == 1 and "not registered" in unknown.stderr
    async with open_database(settings) as db:
        await router_db.register(db, MAC)
    no_ruleset = rulegen(settings, MAC)
    assert no_ruleset.returncode == 1 and "no ruleset" in no_ruleset.stderr
    bad = subprocess.run([sys.executable, "-m", "ops.rulegen", "--mac", "nonsense"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a MAC address" in bad.stderr


async def test_polling_router_gets_first_payloads_and_restart_keeps_schedule(
        fixture_settings, make_client, sql):
    settings = fixture_settings
    await publish(settings)
    settings = settings.replace(rule_generation_enabled=True)
    client = await make_client(settings)
    assert (await client.get("/rules/ids", headers={"X-ID": MAC})).status == 404

    async def has_rules() -> bool:
        return (await client.get("/rules/ids", headers={"X-ID": MAC})).status == 200

    await wait_for(has_rules)  # registered by that first poll, generated within one cycle
    await client.close()
    assert sql.value("SELECT generation_count FROM generation_queue") == 1
    due = sql.value("SELECT next_due_at - generated_at FROM generation_queue")
    assert due.total_seconds() == settings.rule_generation_interval_seconds

    restarted = await make_client(settings)  # a restart does not reset the schedule
    await asyncio.sleep(2.5)
    assert (await restarted.get("/rules/ids", headers={"X-ID": MAC})).status == 200
    assert sql.value("SELECT generation_count FROM generation_queue") == 1


async def test_two_processes_split_routers_without_overlap(fixture_settings, sql):
    settings = fixture_settings
    await publish(settings)
    macs = [f"aa:bb:cc:00:01:{n:02x}" for n in range(40)]
    # A small buffer, so that neither process claims every due router at once.
    config = GenerationConfig.from_settings(settings.replace(rule_generation_queue_capacity=4))
    async with open_database(settings) as db_a, open_database(settings) as db_b:
        for mac in macs:
            await router_db.register(db_a, mac)
        pools = [generation_pool(1, 60) for _ in range(2)]
        services = [GenerationService(db, pool, config, owner=owner)
                    for db, pool, owner in zip((db_a, db_b), pools, ("process-a", "process-b"))]
        for service in services:
            service.start()

        owners_seen: set[str] = set()

        async def all_generated() -> bool:
            owners_seen.update(owner for (owner,) in sql.rows(
                "SELECT DISTINCT claimed_by FROM generation_queue WHERE claimed_by IS NOT NULL"))
            return sql.value("SELECT count(*) FROM generation_queue "
                             "WHERE generation_count > 0") == len(macs)

        try:
            await wait_for(all_generated, timeout=60)
        finally:
            for service in services:
                await service.stop(grace_seconds=10)
            for pool in pools:
                pool.close()
    assert sql.value("SELECT max(generation_count) FROM generation_queue") == 1
    assert services[0].generated + services[1].generated == len(macs)
    assert services[0].generated > 0 and services[1].generated > 0
    assert sql.value("SELECT count(*) FROM router_rules") == len(macs)
    # Each claimed under its own name (both in one process: a shared name would let either
    # renew, release or complete the other's claims).
    assert owners_seen <= {"process-a", "process-b"} and owners_seen
    assert sql.value("SELECT count(*) FROM generation_queue WHERE claimed_by IS NOT NULL") == 0


def sleepy_generation(seconds: int) -> int:
    time.sleep(seconds)
    return seconds


def process_alive(pid: int) -> bool:
    """Running or asleep: neither gone nor a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


async def test_stuck_generation_is_stopped_and_the_others_go_on():
    pool = WorkerPool(sleepy_generation, 2, timeout_seconds=3)
    try:
        # Both workers started first, so that only the stuck call can time out.
        await asyncio.gather(pool.run(0), pool.run(0))
        started = pool_worker_pids()
        assert len(started) == 2
        results = await asyncio.gather(pool.run(60), pool.run(0), pool.run(0),
                                       return_exceptions=True)
        assert isinstance(results[0], WorkerFailed) and "timed out" in str(results[0])
        assert results[1:] == [0, 0]
        assert await pool.run(0) == 0  # the replaced worker serves
        replaced = started - pool_worker_pids()
        assert len(replaced) == 1
        stuck_pid = replaced.pop()

        async def stuck_worker_gone() -> bool:
            return not process_alive(stuck_pid)
        await wait_for(stuck_worker_gone, timeout=10)
    finally:
        pool.close()


async def test_claims_are_short_renewed_while_alive_and_free_after_a_crash(settings, sql):
    def seconds_left() -> float:
        return float(sql.value("SELECT extract(epoch FROM claimed_until - now()) "
                               "FROM generation_queue"))

    async with open_database(settings) as db:
        await router_db.register(db, "aa:bb:cc:00:01:01")
        assert await queue.claim_due(db, "a", 10, CLAIM_LEASE) == ["aa:bb:cc:00:01:01"]
        assert 50 < seconds_left() <= 60
        sql.rows("UPDATE generation_queue SET claimed_until = now() + interval '5 seconds'")
        assert await queue.renew_claims(db, "a", [], CLAIM_LEASE) == 0  # not running
        assert seconds_left() <= 5
        assert await queue.renew_claims(db, "a", ["aa:bb:cc:00:01:01"], CLAIM_LEASE) == 1
        assert seconds_left() > 50
        assert await queue.renew_claims(db, "b", ["aa:bb:cc:00:01:01"], CLAIM_LEASE) == 0
        # "a" died: nobody renews, the claim runs out and another process takes the router
        sql.rows("UPDATE generation_queue SET claimed_until = now() - interval '1 second'")
        assert await queue.renew_claims(db, "a", ["aa:bb:cc:00:01:01"], CLAIM_LEASE) == 0
        assert await queue.claim_due(db, "b", 10, CLAIM_LEASE) == ["aa:bb:cc:00:01:01"]


async def test_junk_records_never_push_alerts_out_of_the_summary(fixture_settings, make_client,
                                                                  sql):
    """Issue 13: the summary read the newest rows of any kind, so 50,000 junk records posted
    after the router's alerts hid them. It reads alerts and flows of the window instead."""
    await publish(fixture_settings)
    client = await make_client(fixture_settings)
    headers = {"X-ID": MAC, "Content-Type": "application/x-ndjson"}
    assert (await client.post("/log/events", data=fixture_alerts(), headers=headers)).status == 200
    junk = b'{"event_type": "stats", "pad": 1}\n' * 60_000
    for path in ("/log/events", "/log/cfm"):
        response = await client.post(path, data=io.BytesIO(junk), headers=headers)
        assert (await response.json())["accepted"] == 60_000
    result = rulegen(fixture_settings, MAC)
    assert result.returncode == 0, result.stderr
    ids, _, _ = stored_payloads(sql)
    reasons = {r["sid"]: r["reason"] for r in ids["rules"]}
    assert all(reasons.get(sid) == "fired" for sid in (9000001, 9000003, 9000008))
