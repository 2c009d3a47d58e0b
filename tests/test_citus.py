"""Citus mode (issue 34, docs/scaling.md), when the tests run against a coordinator with
workers (TEST_CITUS_HOST...): every per-router statement is planned onto one shard, and the
operator's command distributes a database idempotently."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from server.db.citus_nodes import DISTRIBUTED_TABLES
from server.db.connect import connect
from server.generation.applied_sql import CURRENT, STORE_REPORT
from server.hunt.sql import UNREAD_UPLOAD
from server.telemetry.sql import INSERT_CHUNK, ROUTER_CHUNKS, TAKE_SMALL_CHUNKS, summary_statements
from server.console.sql import ROUTER_PAGE_ON_ITS_SHARD, ROUTER_PAGE_ON_THE_COORDINATOR
from server.db.partitions import partition_name
from server.db.rows import RowsInsert
from server.routers.key_sql import KEY_HASH
from server.generation.rules_sql import (MOVE_POLL_ADDRESS, PAYLOAD_CHANGED, PAYLOAD_TIMES, READ_PAYLOAD,
                             RECORD_ACTIVATION)
from server.telemetry.upload_key_sql import INSERT_KEY, RECORDED
from server.generation.sql import MAX_ALERTS, RESCHEDULE, STORE_PAYLOADS, TELEMETRY_SUMMARY
from testkit.database import citus_workers, command_env

MAC = "aa:bb:cc:00:34:01"
NOW = datetime.now(timezone.utc)

CHUNK = {"kind": "events", "received_at": NOW, "first_received_at": NOW, "records": 2,
         "upload_times": [NOW], "upload_records": [2], "body": b"\x28\xb5\x2f\xfd"}
SUMMARY = {"mac": MAC, "hour": NOW.replace(minute=0, second=0, microsecond=0),
           "summarised_at": NOW, "flow_ids_kept": 64,
           "alerts": [{"sid": 1, "src": "10.0.0.1", "dest": "10.0.0.2", "severity": 1,
                       "alerts": 3, "flow_ids": ["1"], "last_seen": None},
                      {"sid": 2, "src": None, "dest": "10.0.0.2", "severity": None,
                       "alerts": 1, "flow_ids": [], "last_seen": NOW.isoformat()}],
           "flows": [{"app_proto": "dns", "dest_port": None, "flows": 2},
                     {"app_proto": None, "dest_port": 53, "flows": 2}]}
ALERTS, FLOWS = summary_statements(SUMMARY)
KEY = {"kind": "events", "key": "k-1", "fingerprint": b"\x00" * 32, "answer": "{}"}
PAYLOADS = {"ids_gz": b"x", "ids_etag": "e1", "firewall_gz": b"y", "firewall_etag": "e2"}

# What a router's requests, its generation and its console page run against the database,
# with parameters: each must be planned onto the router's one shard, all the way down.
PER_ROUTER = {
    "ingestion: chunk": (INSERT_CHUNK, CHUNK),
    "ingestion: alert summary rows": (ALERTS, {}),
    "ingestion: flow summary rows": (FLOWS, {}),
    "idempotency key: record": (INSERT_KEY, KEY),
    "idempotency key: recorded answer": (RECORDED, KEY),
    "generation: summary": (TELEMETRY_SUMMARY, {
        "window": timedelta(days=7), "detail_from": NOW - timedelta(days=3), "severity": 2,
        "sids": 10, "top": 10, "alerts": MAX_ALERTS}),
    "generation: payloads stored": (STORE_PAYLOADS, PAYLOADS),
    "payload read": (READ_PAYLOAD["ids"], {"known": ["e1"]}),
    "activation": (RECORD_ACTIVATION, {"address": "192.0.2.1"}),
    "poll address moved": (MOVE_POLL_ADDRESS, {"address": "192.0.2.1"}),
    "payload times": (PAYLOAD_TIMES, {}),
    "applied report: stored": (STORE_REPORT, {"ids": "e1", "firewall": "e2", "ok": True,
                                              "detail": None}),
    "applied report: current": (CURRENT, {"ids": "e1", "firewall": "e2"}),
    "router key": (KEY_HASH, {}),
    "export": (ROUTER_CHUNKS, {"kind": None, "since": NOW - timedelta(days=1),
                               "until": NOW}),
    "compaction: take a router's small chunks": (
        TAKE_SMALL_CHUNKS.format(partition=partition_name(
            "telemetry_chunks", NOW + timedelta(days=2)), unread=UNREAD_UPLOAD),
        {"kind": "events", "settled": NOW, "size": 1000, "chunks": 10}),
}

PER_ROUTER.update({f"console's router page: {name}": (statement, {})
                   for name, statement in ROUTER_PAGE_ON_ITS_SHARD.items()})

# Statements of the coordinator's own tables, which no shard is involved in.
COORDINATOR_ONLY = {**{f"console's router page: {name}": (statement, {})
                       for name, statement in ROUTER_PAGE_ON_THE_COORDINATOR.items()},
                    "generation: reschedule": (RESCHEDULE, {
                        "key": MAC, "owner": "t", "interval": timedelta(hours=1),
                        "seconds": 1.0}),
                    "payload change notification": (PAYLOAD_CHANGED, {})}


@pytest.fixture
def citus(pg_server):
    if not citus_workers(pg_server):
        pytest.skip("not a Citus coordinator (TEST_CITUS_HOST names one: docs/scaling.md)")


def plan(database, statement: str | RowsInsert, params: dict) -> str:
    conn = connect(database)
    try:
        with conn.cursor() as cur:
            if isinstance(statement, RowsInsert):  # its values bound by this cursor
                cur.execute("EXPLAIN (COSTS OFF) " + statement.text(cur))
            else:
                cur.execute("EXPLAIN (COSTS OFF) " + statement, {"mac": MAC, **params})
            return "\n".join(row[0] for row in cur.fetchall())
    finally:
        conn.close()


def task_counts(text: str) -> list[int]:
    """The shards each distributed step of a plan runs on (one entry per step)."""
    return [int(count) for count in re.findall(r"Task Count: (\d+)", text)]


# What a single-shard statement's plan never holds, at any depth: a subplan Citus runs first
# (its result pulled to the coordinator and sent on), an INSERT ... SELECT pulled through
# the coordinator or repartitioned, a step on several shards. Each of these takes locks on
# other routers' shard groups (issue 45: uploads stalled behind a shard move they had no
# part in).
NOT_SINGLE_SHARD = re.compile(r"Distributed Subplan|pull to coordinator|repartition"
                              r"|Task Count: (?!1\b)\d+", re.IGNORECASE)


def single_shard(text: str) -> bool:
    return bool(task_counts(text)) and NOT_SINGLE_SHARD.search(text) is None


@pytest.mark.parametrize("name", PER_ROUTER)
def test_per_router_statement_runs_on_one_shard_all_the_way_down(citus, database, name):
    statement, params = PER_ROUTER[name]
    text = plan(database, statement, params)
    assert single_shard(text), text


def test_the_check_sees_subplans_pulled_to_the_coordinator(citus, database):
    """The upload statement of before (data-modifying CTEs, INSERT ... SELECT from a
    function) planned with Task Count 1 at its top, and pulled its parts through the
    coordinator."""
    text = plan(database, "WITH stored AS (INSERT INTO router_applied (mac, ok) "
                          "SELECT %(mac)s, true FROM generate_series(1, 1) "
                          "ON CONFLICT (mac) DO NOTHING) SELECT 1", {})
    assert not single_shard(text), text


@pytest.mark.parametrize("name", COORDINATOR_ONLY)
def test_coordinator_statement_touches_no_shard(citus, database, name):
    statement, params = COORDINATOR_ONLY[name]
    assert task_counts(plan(database, statement, params)) == []


def test_the_check_sees_a_statement_that_fans_out(citus, database):
    text = plan(database, "SELECT count(*) FROM telemetry_chunks WHERE records > 1", {})
    assert set(task_counts(text)) == {4}, text


def test_every_per_router_table_is_distributed_and_colocated(citus, sql):
    rows = dict(sql.rows("SELECT c.relname, p.colocationid FROM pg_dist_partition p "
                         "JOIN pg_class c ON c.oid = p.logicalrelid WHERE NOT c.relispartition"))
    assert set(rows) == set(DISTRIBUTED_TABLES)
    assert len(set(rows.values())) == 1
    local = {name for (name,) in sql.rows(
        "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND NOT relispartition "
        "AND relnamespace = 'public'::regnamespace")} - set(rows)
    assert {"generation_queue", "firewall_allowlist", "rule_overrides",
            "notifications"} <= local


def test_distribute_again_changes_nothing(citus, settings, sql):
    before = sql.value("SELECT count(*) FROM pg_dist_shard")
    result = subprocess.run([sys.executable, "-m", "ops.cli", "citus", "distribute"],
                            env=command_env(settings), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "routers: distributed already" in result.stdout
    assert sql.value("SELECT count(*) FROM pg_dist_shard") == before


def test_distribute_on_plain_postgresql_says_what_to_do(pg_server, settings, sql):
    if citus_workers(pg_server):
        pytest.skip("a Citus coordinator")
    result = subprocess.run([sys.executable, "-m", "ops.cli", "citus", "distribute"],
                            env=command_env(settings), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert "the citus extension is not installed" in result.stderr
    # Nothing was changed on the way: the foreign keys Citus mode drops are still there.
    assert sql.value("SELECT count(*) FROM pg_constraint WHERE conname IN "
                     "('firewall_allowlist_mac_fkey', 'rule_overrides_mac_fkey')") == 2
