"""What a generation worker process runs for one router, database work included: renew the
lease and read the telemetry summary, generate (engine.worker), store both payloads with
the next due time (one transaction). Only a small summary goes back to the event
loop, so the database work scales with the workers instead of queueing in the server process.

Synchronous (psycopg2): it runs in the worker process, which keeps one connection of its own.
Each wait on that connection is bounded by the task's `db_timeout` (a wait callback), so a
network cut between worker and database fails the generation within that time, like any
statement of the event loop, instead of blocking the worker until the command timeout.
"""

from __future__ import annotations

import contextlib
import select
import time
from dataclasses import dataclass
from datetime import timedelta

import psycopg2
import psycopg2.extensions

from engine.generate import PayloadLimits, TelemetrySummary
from engine.worker import GenerationJob, generate_for_router
from server.db.pool import DatabaseUnavailable
from server.db.rules import PAYLOAD_CHANGED, payload_params, upsert_statement
from server.generation.queue import RENEW_ONE

# Bounds on what the summary returns per router.
MAX_FIRED_SIDS = 2_000
TOP_FLOW_VALUES = 32
MAX_ALERTS = 5_000
OWN_ADDRESSES = 100       # newest activations (or rolled-up days) whose addresses are
                          # never blocked


class LeaseLost(Exception):
    """Our lease on this router ran out (another owner may hold it now); nothing is stored."""


@dataclass(frozen=True)
class RouterTask:
    dsn: str
    owner: str                # the lease owner
    mac: str
    version_dir: str          # the published ruleset to use (resolved `current`)
    rules_file: str           # where to write the router's .rules file
    lease: timedelta
    window: timedelta         # telemetry that shapes the rules
    block_severity: int
    interval: timedelta       # until the router is due again
    limits: PayloadLimits
    db_timeout: float         # longest wait for the database (connect or one statement)


@dataclass(frozen=True)
class RouterGenerated:
    mac: str
    version: str
    stats: dict
    seconds: float


class _WorkerConnection:
    """This worker process's connection: opened on first use, reopened after a failure."""

    def __init__(self) -> None:
        self._conn = None
        self.timeout = 30.0

    def get(self, dsn: str, timeout: float):
        self.timeout = timeout
        psycopg2.extensions.set_wait_callback(self._wait)
        if self._conn is None or self._conn.closed:
            self._conn = psycopg2.connect(dsn, connect_timeout=max(1, round(timeout)))
            self._conn.autocommit = True
        return self._conn

    def _wait(self, conn) -> None:
        """psycopg2's wait callback (its `wait_select`, with a deadline)."""
        deadline = time.monotonic() + self.timeout
        while (state := conn.poll()) != psycopg2.extensions.POLL_OK:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise psycopg2.OperationalError(
                    f"no answer from the database in {self.timeout:g}s")
            if state == psycopg2.extensions.POLL_READ:
                select.select([conn.fileno()], [], [], remaining)
            else:
                select.select([], [conn.fileno()], [], remaining)

    def discard(self) -> None:
        if self._conn is not None:
            self._conn.close()


_CONNECTION = _WorkerConnection()


def generate_and_store(task: RouterTask) -> RouterGenerated:
    """The function the generation pool runs. LeaseLost when our lease ran out;
    DatabaseUnavailable when the database cannot be reached."""
    try:
        conn = _CONNECTION.get(task.dsn, task.db_timeout)
        with conn.cursor() as cur:
            summary = _renew_and_summarise(cur, task)
        result = generate_for_router(GenerationJob(task.mac, task.version_dir, task.rules_file,
                                                   summary, task.limits))
        with conn.cursor() as cur:
            _complete(cur, task, {"ids": (result.ids_gz, result.ids_etag),
                                  "firewall": (result.firewall_gz, result.firewall_etag)},
                      result.seconds)
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as error:
        _CONNECTION.discard()
        raise DatabaseUnavailable(str(error).strip().splitlines()[0]) from None
    return RouterGenerated(task.mac, result.version, result.stats, result.seconds)


# Both bounds, so that only the partitions of the window are read (the plans are checked by
# tests/test_partition_pruning.py). No row is newer than now(): received_at is when its
# request began, activated_at the database's now().
WITHIN_WINDOW = "{time} > now() - %(window)s AND {time} <= now()"
# The hourly summaries (migration 0018) count an hour while any of it is within the window.
HOURS_IN_WINDOW = "hour > now() - %(window)s - interval '1 hour' AND hour <= now()"
_ALERTS = f"telemetry_alerts WHERE mac = %(mac)s AND {HOURS_IN_WINDOW}"
_FLOWS = f"telemetry_flows WHERE mac = %(mac)s AND {HOURS_IN_WINDOW}"

# Two statements, so that under Citus each runs where its tables are: the lease, the
# rollup boundary, the allowlist and the overrides are tables of the coordinator; the
# telemetry summary and the router's addresses are the router's own (one shard).
RENEW_AND_TUNING = f"""WITH renewed AS ({RENEW_ONE})
SELECT
 (SELECT count(*) FROM renewed),
 (SELECT detail_from FROM activation_rollup),
 (SELECT array_agg(network::text) FROM firewall_allowlist
  WHERE mac IS NULL OR mac = %(mac)s),
 (SELECT json_agg(json_build_array(id, action, selector, mac IS NOT NULL) ORDER BY id)
  FROM rule_overrides WHERE mac IS NULL OR mac = %(mac)s)"""

# Activations before `detail_from` (read by RENEW_AND_TUNING) are rolled up by day.
TELEMETRY_SUMMARY = f"""WITH
 blockable AS (SELECT * FROM {_ALERTS} AND severity <= %(severity)s),
 pairs AS (SELECT src_ip, dest_ip, signature_id, min(severity) AS severity,
           sum(alerts) AS n, max(last_seen) AS last_seen
           FROM blockable GROUP BY 1, 2, 3),
 pair_flows AS (SELECT src_ip, dest_ip, signature_id, count(DISTINCT flow_id) AS flows
                FROM blockable, unnest(flow_ids) AS flow_id GROUP BY 1, 2, 3)
SELECT
 (SELECT json_agg(json_build_array(sid, n, severity)) FROM (
   SELECT signature_id AS sid, sum(alerts) AS n, coalesce(min(severity), 255) AS severity
   FROM {_ALERTS} GROUP BY 1 ORDER BY 3, 2 DESC, 1 LIMIT %(sids)s) fired),
 (SELECT array_agg(app_proto) FROM (SELECT app_proto FROM {_FLOWS} AND app_proto IS NOT NULL
   GROUP BY app_proto ORDER BY sum(flows) DESC, app_proto LIMIT %(top)s) apps),
 (SELECT array_agg(dest_port) FROM (SELECT dest_port FROM {_FLOWS} AND dest_port IS NOT NULL
   GROUP BY dest_port ORDER BY sum(flows) DESC, dest_port LIMIT %(top)s) ports),
 (SELECT json_agg(json_build_array(src, dest, sid, severity, n, flows, expires)) FROM (
   SELECT host(p.src_ip) AS src, host(p.dest_ip) AS dest, p.signature_id AS sid, p.severity,
          p.n, coalesce(f.flows, 0) AS flows,
          to_char((p.last_seen + %(window)s) AT TIME ZONE 'UTC',
                  'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS expires
   FROM pairs p LEFT JOIN pair_flows f ON f.signature_id = p.signature_id
        AND f.src_ip IS NOT DISTINCT FROM p.src_ip AND f.dest_ip IS NOT DISTINCT FROM p.dest_ip
   ORDER BY p.n DESC LIMIT %(alerts)s) alerts),
 (SELECT array_agg(DISTINCT host(address)) FROM (
   (SELECT address, activated_at AS seen FROM activations
    WHERE mac = %(mac)s AND address IS NOT NULL AND activated_at >= %(detail_from)s
    AND {WITHIN_WINDOW.format(time='activated_at')}
    ORDER BY activated_at DESC LIMIT {OWN_ADDRESSES})
   UNION ALL
   (SELECT address, last_seen FROM activation_days
    WHERE mac = %(mac)s AND address IS NOT NULL AND day < %(detail_from)s
    AND day > now() - %(window)s - interval '1 day' AND day <= now()
    ORDER BY day DESC LIMIT {OWN_ADDRESSES})
   ORDER BY seen DESC LIMIT {OWN_ADDRESSES}) own)"""


def _renew_and_summarise(cur, task: RouterTask) -> TelemetrySummary:
    """Renew the lease, then read what the router's telemetry of the window says (its hourly
    summaries), where it called from, its allowlist and rule overrides."""
    params = {"owner": task.owner, "mac": task.mac, "lease": task.lease,
              "window": task.window, "severity": task.block_severity,
              "sids": MAX_FIRED_SIDS, "top": TOP_FLOW_VALUES, "alerts": MAX_ALERTS}
    cur.execute(RENEW_AND_TUNING, params)
    renewed, detail_from, allowlist, overrides = cur.fetchone()
    if not renewed:
        raise LeaseLost(f"the lease on {task.mac} ran out before its generation began")
    cur.execute(TELEMETRY_SUMMARY, {**params, "detail_from": detail_from})
    fired, apps, ports, alerts, own = cur.fetchone()
    return TelemetrySummary(fired=[tuple(row) for row in fired or []], app_protos=apps or [],
                            dest_ports=ports or [],
                            alerts=[tuple(alert) for alert in alerts or []],
                            own_addresses=own or [], allowlist=allowlist or [],
                            overrides=[tuple(row) for row in overrides or []])


# Reschedule, only while the lease is ours; the payloads are stored in the same transaction
# (the row lock taken here holds the lease until the commit).
RESCHEDULE = """
UPDATE generation_queue SET claimed_by = NULL, claimed_until = NULL, generated_at = now(),
    next_due_at = now() + %(interval)s, generation_count = generation_count + 1,
    attempts = 0, last_error = NULL, last_seconds = %(seconds)s
WHERE mac = %(mac)s AND claimed_by = %(owner)s AND claimed_until >= now()"""
STORE_PAYLOADS = upsert_statement(("firewall", "ids"))


def _complete(cur, task: RouterTask, payloads: dict[str, tuple[bytes, str]],
              seconds: float) -> None:
    """Store both payloads and reschedule the router, atomically, if the lease is still ours;
    the servers are notified when a payload changed (server/db/rules.py)."""
    params = {**payload_params(task.mac, payloads), "owner": task.owner,
              "interval": task.interval, "seconds": seconds}
    cur.execute("BEGIN")
    try:
        cur.execute(RESCHEDULE, params)
        if cur.rowcount != 1:
            raise LeaseLost(f"lease on {task.mac} lost before its result was stored")
        cur.execute(STORE_PAYLOADS, params)
        if cur.rowcount == 1:
            cur.execute(PAYLOAD_CHANGED, params)
    except BaseException:
        with contextlib.suppress(psycopg2.Error):  # a lost connection rolled back already
            cur.execute("ROLLBACK")
        raise
    cur.execute("COMMIT")
