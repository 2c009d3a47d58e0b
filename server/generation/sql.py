"""The generation queue's SQL: as the event loop runs it (claim due routers, renew, release
and reschedule claims, read the queue's state) and as a generation worker process runs it on
its own connection (renew the lease and read the router's summary, then store its payloads
and reschedule it).

Claims are leases (server/db/leases.py), owned by a process name
(server.background.process_name(), or `rulegen@...` for the command).
"""

from __future__ import annotations

from datetime import timedelta

import psycopg

from engine.generate import Holds, TelemetrySummary
from server.db.activation_days import DETAIL_FROM_READ
from server.db import leases
from server.db.leases import (Leased, claim_one_statement, claim_statement, fail_statement,
                              finish_statement, renew_statement)
from server.db.pool import Database, execute
from server.fleet.sql import OUTBREAKS_FOR_GENERATION
from server.generation.rules_sql import (DECLARED, DECLARED_NOW, PAYLOAD_CHANGED,
                                         REGENERATION_GAP, declared_params, payload_params,
                                         upsert_statement)
from server.telemetry.sql import ALERTS_IN_WINDOW, FLOWS_IN_WINDOW

# Bounds on what the summary returns per router.
MAX_FIRED_SIDS = 2_000
TOP_FLOW_VALUES = 32
MAX_ALERTS = 5_000
OWN_ADDRESSES = 100       # newest activations (or rolled-up days) whose addresses are
                          # never blocked


class LeaseLost(Exception):
    """Our lease on this router ran out (another owner may hold it now); nothing is stored."""


QUEUE = Leased("generation_queue", "mac", "macaddr", "next_due_at")
# Never-generated routers first, then by due time.
_CLAIM_DUE = claim_statement(QUEUE, order="(generated_at IS NOT NULL), next_due_at")
CLAIM_ONE = claim_one_statement(QUEUE)
# The worker's first statement renews the lease, never takes one: had it been allowed to
# take an unclaimed router, a worker's statement held through a network cut would claim
# back, after the router's failure was recorded, the router its worker had given up on.
RENEW_ONE = renew_statement(QUEUE)

_STATE = f"""
SELECT count(*) FILTER (WHERE claimed_until >= now()),
       count(*) FILTER (WHERE {QUEUE.free}),
       count(*) FILTER (WHERE next_due_at <= now() - interval '1 hour'),
       count(*) FILTER (WHERE attempts > 0),
       count(*)
FROM generation_queue"""


async def claim_due(db: Database, owner: str, limit: int, lease: timedelta) -> list[str]:
    return [row[0] for row in await leases.claim(db, _CLAIM_DUE, owner, lease, limit)]


async def claim_router(db: Database, owner: str, mac: str, lease: timedelta) -> bool:
    """Take (or renew) the lease on one router; False when another owner holds it."""
    return await leases.claim_one(db, CLAIM_ONE, owner, mac, lease)


async def renew_claims(db: Database, owner: str, macs: list[str], lease: timedelta) -> int:
    return await leases.renew(db, QUEUE, owner, macs, lease)


async def release(db: Database, owner: str, mac: str) -> None:
    await leases.release(db, QUEUE, owner, mac)


_FAIL = fail_statement(QUEUE)


async def fail(db: Database, owner: str, mac: str, interval: timedelta, error: str) -> None:
    """Retry later with backoff (1, 2, 4 ... minutes, at most the normal interval)."""
    await db.execute(_FAIL, {"owner": owner, "key": mac, "error": error,
                             **leases.backoff(timedelta(minutes=1), interval)})


async def queue_state(db: Database) -> dict[str, int]:
    """Routers being generated now, due and waiting, due for over an hour (generation falls
    behind), whose last generation failed, and in the queue at all."""
    claimed, due, overdue, failing, total = await db.fetchone(_STATE)
    return {"claimed": claimed, "due": due, "overdue": overdue, "failing": failing,
            "total": total}


# Both bounds, so that only the partitions of the window are read (the plans are checked by
# tests/test_partition_pruning.py). No row is newer than now(): received_at is when its
# request began, activated_at the database's now().
WITHIN_WINDOW = "{time} > now() - %(window)s AND {time} <= now()"

# Two statements, so that under Citus each runs where its tables are: the lease, the
# rollup boundary, the allowlist, the intel's decisions, the overrides and the fleet's
# outbreaks are tables of the coordinator; the telemetry summary and the router's addresses
# are the router's own (one shard). What the router's firewall never blocks: the allowlist's
# networks (the fleet's and its own), and the addresses and networks the intel holds as seen
# by too much of the fleet (a resolver, a CDN) unless an operator released them.
RENEW_AND_TUNING = f"""WITH renewed AS ({RENEW_ONE})
SELECT
 (SELECT count(*) FROM renewed),
 {DETAIL_FROM_READ},
 (SELECT array_agg(network) FROM (
   SELECT network::text FROM firewall_allowlist WHERE mac IS NULL OR mac = %(mac)s
   UNION ALL
   SELECT value FROM intel_decisions WHERE kind IN ('ip', 'network') AND decision = 'held'
     AND routers IS NOT NULL) exempt),
 (SELECT json_agg(json_build_array(id, action, selector, mac IS NOT NULL) ORDER BY id)
  FROM rule_overrides WHERE mac IS NULL OR mac = %(mac)s),
 {OUTBREAKS_FOR_GENERATION}"""

# Activations before `detail_from` (read by RENEW_AND_TUNING) are rolled up by day. The
# window's summaries are each read once (a CTE read twice is materialized): a packed day's
# arrays are unnested once (server/telemetry/summary_days.py).
TELEMETRY_SUMMARY = f"""WITH
 window_alerts AS (SELECT * FROM {ALERTS_IN_WINDOW} a),
 window_flows AS (SELECT * FROM {FLOWS_IN_WINDOW} f),
 blockable AS (SELECT * FROM window_alerts WHERE severity <= %(severity)s),
 pairs AS (SELECT src_ip, dest_ip, signature_id, min(severity) AS severity,
           sum(alerts) AS n, max(last_seen) AS last_seen
           FROM blockable GROUP BY 1, 2, 3),
 pair_flows AS (SELECT src_ip, dest_ip, signature_id, count(DISTINCT flow_id) AS flows
                FROM blockable, unnest(flow_ids) AS flow_id GROUP BY 1, 2, 3)
SELECT
 (SELECT json_agg(json_build_array(sid, n, severity)) FROM (
   SELECT signature_id AS sid, sum(alerts) AS n, coalesce(min(severity), 255) AS severity
   FROM window_alerts GROUP BY 1 ORDER BY 3, 2 DESC, 1 LIMIT %(sids)s) fired),
 (SELECT array_agg(app_proto) FROM (SELECT app_proto FROM window_flows
   WHERE app_proto IS NOT NULL
   GROUP BY app_proto ORDER BY sum(flows) DESC, app_proto LIMIT %(top)s) apps),
 (SELECT array_agg(dest_port) FROM (SELECT dest_port FROM window_flows
   WHERE dest_port IS NOT NULL
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
    AND {WITHIN_WINDOW.format(time='last_seen')}
    ORDER BY day DESC LIMIT {OWN_ADDRESSES})
   ORDER BY seen DESC LIMIT {OWN_ADDRESSES}) own),
 (SELECT json_build_array{DECLARED} FROM generation_queue WHERE mac = %(mac)s)"""


async def renew_and_summarise(cur: psycopg.AsyncCursor, owner: str, mac: str,
                              lease: timedelta, window: timedelta,
                              block_severity: int) -> TelemetrySummary:
    """In a generation worker: renew the lease, then read what the router's
    telemetry of the window says (its hourly summaries), where it called from, its allowlist
    and rule overrides. LeaseLost when the lease ran out."""
    params = {"owner": owner, "mac": mac, "keys": [mac], "lease": lease, "window": window,
              "severity": block_severity, "sids": MAX_FIRED_SIDS, "top": TOP_FLOW_VALUES,
              "alerts": MAX_ALERTS}
    await execute(cur, RENEW_AND_TUNING, params)
    renewed, detail_from, allowlist, overrides, outbreaks = await cur.fetchone()
    if not renewed:
        raise LeaseLost(f"the lease on {mac} ran out before its generation began")
    await execute(cur, TELEMETRY_SUMMARY, {**params, "detail_from": detail_from})
    fired, apps, ports, alerts, own, holds = await cur.fetchone()
    return TelemetrySummary(fired=[tuple(row) for row in fired or []], app_protos=apps or [],
                            dest_ports=ports or [],
                            alerts=[tuple(alert) for alert in alerts or []],
                            own_addresses=own or [], allowlist=allowlist or [],
                            overrides=[tuple(row) for row in overrides or []],
                            outbreaks=[tuple(row) for row in outbreaks or []],
                            holds=Holds(*holds) if holds else Holds())


# Reschedule, only while the lease is ours; the payloads are stored in the same transaction
# (the row lock taken here holds the lease until the commit). A router that declared other
# bounds while it was generated is due again the gap after this generation (at once after
# its first: `generated_at` is still the one before this).
RESCHEDULE = finish_statement(
    QUEUE, f"next_due_at = CASE WHEN {DECLARED} IS NOT DISTINCT FROM {DECLARED_NOW} "
           f"THEN now() + %(interval)s WHEN generated_at IS NULL THEN now() "
           f"ELSE now() + {REGENERATION_GAP} END, generated_at = now(), "
           "generation_count = generation_count + 1, attempts = 0, "
           "last_error = NULL, last_seconds = %(seconds)s")
STORE_PAYLOADS = upsert_statement(("firewall", "ids"))


async def complete(cur: psycopg.AsyncCursor, owner: str, mac: str, interval: timedelta,
                   payloads: dict[str, tuple[bytes, str]], seconds: float, holds: Holds
                   ) -> None:
    """In a generation worker: store both payloads (generated within `holds`) and
    reschedule the router, atomically, if the lease is still ours (LeaseLost if not); the
    servers are notified when a payload changed (server/generation/rules_sql.py)."""
    params = {**payload_params(mac, payloads), **declared_params(holds), "key": mac,
              "owner": owner, "interval": interval, "seconds": seconds}
    async with cur.connection.transaction():  # a lost connection has rolled back already
        await execute(cur, RESCHEDULE, params)
        if cur.rowcount != 1:
            raise LeaseLost(f"lease on {mac} lost before its result was stored")
        await execute(cur, STORE_PAYLOADS, params)
        if cur.rowcount == 1:
            await execute(cur, PAYLOAD_CHANGED, params)


# A router removed (server/removal.py): its place in the queue.
FORGET_ROUTER = "DELETE FROM generation_queue WHERE mac = %(mac)s"
