"""The SQL of telemetry at rest (migration 0018): chunk rows, the hourly summary rows that
ingestion adds to, and what export, compaction and generation read of them.

Parameters shared by the statements: %(mac)s, %(kind)s; a chunk's (Chunk.params in
server/telemetry/chunks.py) and a summary's (Summary.params in server/telemetry/summary.py).
"""

from __future__ import annotations

from server.db.rows import RowsInsert

# One statement per table, each a plain INSERT ... VALUES naming the router's MAC: under Citus
# each is planned onto the router's one shard and run there whole (an INSERT ... SELECT from
# a function, or data-modifying CTEs, are pulled through the coordinator and lock every
# shard group: issue 45). A request's statements share its transaction.
INSERT_CHUNK = """INSERT INTO telemetry_chunks (mac, kind, received_at, first_received_at,
    records, upload_times, upload_records, body)
VALUES (%(mac)s, %(kind)s, %(received_at)s, %(first_received_at)s, %(records)s,
    %(upload_times)s::timestamptz[], %(upload_records)s::integer[], %(body)s)"""

_ALERT_FIELDS = ("src", "dest", "sid", "severity", "alerts", "last_seen", "flow_ids")
_ALERT_ROW = ("({mac}, {hour}, %s::inet, %s::inet, %s, %s, %s, "
              "coalesce(%s::timestamptz, {summarised_at}), %s::text[], {network}::cidr)")
# `network`: the upload's reporter network (migration 0026), the last upload's on a row that
# several added to; what the fleet credits the row's alerts to.
_ADD_ALERTS = """INSERT INTO telemetry_alerts AS t (mac, hour, src_ip, dest_ip, signature_id,
    severity, alerts, last_seen, flow_ids, network)
VALUES {values}
ON CONFLICT (mac, hour, signature_id, src_ip, dest_ip, severity) DO UPDATE SET
    alerts = t.alerts + excluded.alerts, last_seen = greatest(t.last_seen, excluded.last_seen),
    flow_ids = merged_flow_ids(t.flow_ids, excluded.flow_ids, %(flow_ids_kept)s),
    network = coalesce(excluded.network, t.network)"""

_FLOW_FIELDS = ("app_proto", "dest_port", "flows")
_FLOW_ROW = "({mac}, {hour}, %s, %s, %s)"
_ADD_FLOWS = """INSERT INTO telemetry_flows AS t (mac, hour, app_proto, dest_port, flows)
VALUES {values}
ON CONFLICT (mac, hour, app_proto, dest_port) DO UPDATE SET flows = t.flows + excluded.flows"""


def summary_statements(params: dict) -> list[RowsInsert]:
    """The statements adding a summary (Summary.params, with the router's `mac`): its alert
    rows into telemetry_alerts, its flow rows into telemetry_flows, each table one statement
    (none for a table without rows); `network`, when given, the upload's reporter network."""
    shared = {name: params[name] for name in ("mac", "hour", "summarised_at", "flow_ids_kept")}
    shared["network"] = params.get("network")
    statements = []
    if alerts := params["alerts"]:
        statements.append(RowsInsert(_ADD_ALERTS, _ALERT_ROW, _row_values(alerts, _ALERT_FIELDS),
                                     shared))
    if flows := params["flows"]:
        statements.append(RowsInsert(_ADD_FLOWS, _FLOW_ROW, _row_values(flows, _FLOW_FIELDS),
                                     shared))
    return statements


def _row_values(rows: list[dict], fields: tuple[str, ...]) -> list[tuple]:
    return [tuple(row[name] for name in fields) for row in rows]


# A router's chunks (of one kind, or both), oldest first, that may hold records received in
# [since, until): the chunk's newest record is not older than `since`, its oldest not newer.
ROUTER_CHUNKS = """SELECT id, kind, upload_times, upload_records, body FROM telemetry_chunks
WHERE mac = %(mac)s AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND received_at >= %(since)s AND first_received_at < %(until)s
ORDER BY received_at, id"""


# Compaction (server/telemetry/compaction.py): routers' small settled chunks in one partition
# (named from the catalog: under Citus a row's tableoid would name its shard).
SMALL_CHUNK_GROUPS = """SELECT mac::text, kind, count(*) FROM {partition}
WHERE received_at >= %(since)s AND received_at < %(settled)s AND records < %(size)s
GROUP BY 1, 2 HAVING count(*) > 1 ORDER BY 1, 2"""

# Taken out of one partition (named: PostgreSQL takes a partition as a table), oldest first.
# The router's MAC outside the subquery too: under Citus, that makes it one shard's statement.
# An upload still `unread` by the hunt indexer keeps its chunks as written (it finds them by
# their received_at): the condition is the hunt's (server/hunt/sql.py UNREAD_UPLOAD), given
# by the caller, so that telemetry names no table of the hunt.
TAKE_SMALL_CHUNKS = """DELETE FROM {partition}
WHERE mac = %(mac)s AND (mac, kind, received_at, id) IN (
    SELECT c.mac, c.kind, c.received_at, c.id FROM {partition} c
    WHERE c.mac = %(mac)s AND c.kind = %(kind)s AND c.received_at < %(settled)s
      AND c.records < %(size)s
      AND NOT {unread}
    ORDER BY c.received_at, c.id LIMIT %(chunks)s)
RETURNING received_at, id, upload_times, upload_records, body"""

# Moving the row tables of before (server/telemetry/legacy.py), a batch at a time: the next
# rows' keys and sizes, then those of them that fit the batch taken out.
NEXT_LEGACY_ROWS = """SELECT mac::text, received_at, id, octet_length(record::text)
FROM {table} ORDER BY mac, received_at, id LIMIT %(rows)s"""
TAKE_LEGACY_ROWS = """DELETE FROM {table} WHERE (mac, received_at, id) IN (
    SELECT * FROM unnest(%(macs)s::macaddr[], %(times)s::timestamptz[], %(ids)s::bigint[]))
RETURNING mac::text, received_at, id, record::text"""


# The hourly summaries (migration 0018) count an hour while any of it is within the window
# (`window`): the generation's and the fleet job's reads of them.
_IN_WINDOW = "{hour} > now() - %(window)s - interval '1 hour' AND {hour} <= now()"
HOURS_IN_WINDOW = _IN_WINDOW.format(hour="hour")

# A closed day partition's flow rows packed (server/telemetry/flow_days.py): its routers,
# then some of them at a time, each router's rows of one day as one row (a day packed
# already is kept as it is: its rows are the same).
PARTITION_FLOW_ROUTERS = "SELECT DISTINCT mac::text FROM {partition} ORDER BY 1"
_ROW_ORDER = "ORDER BY hour, app_proto, dest_port"
PACK_FLOW_DAYS = f"""INSERT INTO telemetry_flow_days (mac, day, hours, app_protos, dest_ports,
    flows)
SELECT mac, %(day)s,
    array_agg((extract(epoch FROM hour - %(day)s) / 3600)::smallint {_ROW_ORDER}),
    array_agg(app_proto {_ROW_ORDER}), array_agg(dest_port {_ROW_ORDER}),
    array_agg(flows {_ROW_ORDER})
FROM telemetry_flows
WHERE mac = ANY(%(macs)s::macaddr[]) AND hour >= %(day)s AND hour < %(end)s
GROUP BY mac
ON CONFLICT (mac, day) DO NOTHING"""

# A router's flow rows of the window (%(mac)s, %(window)s), the open days' as rows and the
# closed days' from their packed row, hour by hour alike: (app_proto, dest_port, flows). A
# day found packed is read packed only (its rows may not be dropped yet).
_PACKED_DAYS_IN_WINDOW = ("d.mac = %(mac)s AND d.day > now() - %(window)s - interval '1 day "
                          "1 hour' AND d.day <= now()")
FLOWS_IN_WINDOW = f"""(SELECT app_proto, dest_port, flows FROM telemetry_flows r
  WHERE mac = %(mac)s AND {_IN_WINDOW.format(hour="r.hour")}
    AND NOT EXISTS (SELECT 1 FROM telemetry_flow_days d WHERE {_PACKED_DAYS_IN_WINDOW}
                    AND d.day = date_trunc('day', r.hour, 'UTC'))
 UNION ALL
 SELECT f.app_proto, f.dest_port, f.flows FROM telemetry_flow_days d,
   unnest(d.hours, d.app_protos, d.dest_ports, d.flows) AS f(h, app_proto, dest_port, flows)
 WHERE {_PACKED_DAYS_IN_WINDOW}
   AND {_IN_WINDOW.format(hour="d.day + f.h * interval '1 hour'")})"""
