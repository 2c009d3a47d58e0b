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
# (named from the catalog: under Citus a row's tableoid would name its shard), and how many
# records they hold.
SMALL_CHUNK_GROUPS = """SELECT mac::text, kind, sum(records) FROM {partition}
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
_IN_WINDOW = "{hour} > now() - {window} - interval '1 hour' AND {hour} <= now()"
HOURS_IN_WINDOW = _IN_WINDOW.format(hour="hour", window="%(window)s")

# A day partition's summary rows packed (server/telemetry/summary_days.py): its routers
# and their rows, a page at a time, in MAC order along the index its key leads (ordered by
# the column, not by its text): each statement reads only its page's rows, whatever the
# day's size (DB_TIMEOUT_SECONDS bounds each).
PARTITION_ROUTERS = """SELECT mac::text AS router, count(*) FROM {partition}
WHERE %(first)s OR mac > %(after)s::macaddr
GROUP BY mac ORDER BY mac LIMIT %(routers)s"""
# Then some of them at a time, each router's rows of one day as one row, an entry of each
# array per row in one order (a day packed already is kept as it is: its rows are the
# same).
_DAY_ROWS = """FROM {table}
WHERE mac = ANY(%(macs)s::macaddr[]) AND hour >= %(day)s AND hour < %(end)s
GROUP BY mac
ON CONFLICT (mac, day) DO NOTHING"""
_HOUR_OF_DAY = "(extract(epoch FROM {hour} - %(day)s) / 3600)::smallint"


def _arrays(columns: tuple[str, ...], order: str) -> str:
    return ",\n    ".join(f"array_agg({column} ORDER BY {order})" for column in columns)


# Flows are packed as the day's hours settle too (migration 0037): the hours from the
# router-day's `through` (none packed: 0) to %(through)s, an hour count, appended to its
# packed row, or its first; a day packed as far already is left as it is. The same
# statement packs a closed day (%(through)s 24). Then, in the same transaction, the rows
# packed are deleted (a closed day's are dropped with their partition instead). The bare
# `r.hour >= %(day)s` lets the planner prune the hourly partitions. A row's
# hour is compared as an interval from the day's start: Citus refuses a modification whose
# row references meet a STABLE function (timestamptz + interval).
_FLOW_ENTRIES = ("app_protos", "dest_ports", "flows")
PACK_FLOW_HOURS = f"""INSERT INTO telemetry_flow_days AS d (mac, day, hours, app_protos,
    dest_ports, flows, through)
SELECT r.mac, %(day)s,
    {_arrays((_HOUR_OF_DAY.format(hour="r.hour"), "r.app_proto", "r.dest_port",
              "r.flows"), "r.hour, r.app_proto, r.dest_port")},
    %(through)s
FROM telemetry_flows r LEFT JOIN telemetry_flow_days p ON p.mac = r.mac AND p.day = %(day)s
WHERE r.mac = ANY(%(macs)s::macaddr[]) AND r.hour >= %(day)s
  AND r.hour - %(day)s >= coalesce(p.through, 0) * interval '1 hour'
  AND r.hour < %(day)s + %(through)s * interval '1 hour'
GROUP BY r.mac
ON CONFLICT (mac, day) DO UPDATE SET
    hours = d.hours || excluded.hours,
    {", ".join(f"{name} = d.{name} || excluded.{name}" for name in _FLOW_ENTRIES)},
    through = excluded.through
WHERE d.through < excluded.through"""
DELETE_PACKED_FLOWS = """DELETE FROM telemetry_flows r USING telemetry_flow_days d
WHERE r.mac = ANY(%(macs)s::macaddr[]) AND d.mac = r.mac AND d.day = %(day)s
  AND r.hour >= %(day)s AND r.hour - %(day)s < d.through * interval '1 hour'"""
PACK_ALERT_DAYS = f"""INSERT INTO telemetry_alert_days (mac, day, hours, src_ips, dest_ips,
    signature_ids, severities, alerts, last_seen, flow_ids, networks)
SELECT mac, %(day)s,
    {_arrays((_HOUR_OF_DAY.format(hour="hour"), "src_ip", "dest_ip", "signature_id",
              "severity", "alerts", "last_seen", "to_json(flow_ids)::text", "network"),
             "hour, signature_id, src_ip, dest_ip, severity")}
{_DAY_ROWS.format(table="telemetry_alerts")}"""

# A router's summary rows of a window (%(mac)s; `window`, an interval: %(window)s by
# default): the rows of the days not packed, and the packed days' entries hour by hour
# alike. A day found packed is read packed only (its rows may not be dropped yet), up to
# the hour it is packed `through` (of the day's start), if packed in part.
def _in_window(table: str, columns: str, packed: str, arrays: str, entries: str,
               entry_columns: str, window: str, through: str = "") -> str:
    days = (f"d.mac = %(mac)s AND d.day > now() - {window} - interval '1 day 1 hour' "
            "AND d.day <= now()")
    packed_hour = f" AND r.hour < d.day + {through}" if through else ""
    return f"""(SELECT {columns} FROM {table} r
  WHERE mac = %(mac)s AND {_IN_WINDOW.format(hour="r.hour", window=window)}
    AND NOT EXISTS (SELECT 1 FROM {packed} d WHERE {days}
                    AND d.day = date_trunc('day', r.hour, 'UTC'){packed_hour})
 UNION ALL
 SELECT {entry_columns} FROM {packed} d, unnest({arrays}) AS e({entries})
 WHERE {days} AND (d.day > now() - {window} - interval '1 hour'
                   OR d.day + e.h * interval '1 hour' > now() - {window} - interval '1 hour'))"""


def alerts_in_window(window: str = "%(window)s") -> str:
    """(hour, src_ip, dest_ip, signature_id, severity, alerts, last_seen, flow_ids)"""
    return _in_window(
        "telemetry_alerts",
        "hour, src_ip, dest_ip, signature_id, severity, alerts, last_seen, flow_ids",
        "telemetry_alert_days",
        "d.hours, d.src_ips, d.dest_ips, d.signature_ids, d.severities, d.alerts, "
        "d.last_seen, d.flow_ids",
        "h, src_ip, dest_ip, signature_id, severity, alerts, last_seen, flow_ids",
        "d.day + e.h * interval '1 hour', e.src_ip, e.dest_ip, e.signature_id, e.severity, "
        "e.alerts, e.last_seen, ARRAY(SELECT json_array_elements_text(e.flow_ids::json))",
        window)


# (app_proto, dest_port, flows)
FLOWS_IN_WINDOW = _in_window(
    "telemetry_flows", "app_proto, dest_port, flows", "telemetry_flow_days",
    "d.hours, d.app_protos, d.dest_ports, d.flows", "h, app_proto, dest_port, flows",
    "e.app_proto, e.dest_port, e.flows", "%(window)s", "d.through * interval '1 hour'")
ALERTS_IN_WINDOW = alerts_in_window()

# The alert summaries (mac, hour, src_ip, dest_ip, signature_id, severity, alerts) of the
# routers %(macs)s in the period [%(start)s, %(end)s), hour by hour: the hourly rows of the days not packed, the packed days' entries alike (a day found
# packed is read packed only). For the owners' reports (server/reports/): a batch of routers
# in one statement, each read along its key.
ALERTS_BETWEEN = """(SELECT r.mac, r.hour, r.src_ip, r.dest_ip, r.signature_id, r.severity,
         r.alerts
  FROM telemetry_alerts r
  WHERE r.mac = ANY(%(macs)s::macaddr[]) AND r.hour >= %(start)s AND r.hour < %(end)s
    AND NOT EXISTS (SELECT 1 FROM telemetry_alert_days d WHERE d.mac = r.mac
                    AND d.day = date_trunc('day', r.hour, 'UTC'))
 UNION ALL
 SELECT d.mac, d.day + e.h * interval '1 hour', e.src_ip, e.dest_ip, e.signature_id,
        e.severity, e.alerts
 FROM telemetry_alert_days d,
      unnest(d.hours, d.src_ips, d.dest_ips, d.signature_ids, d.severities, d.alerts)
          AS e(h, src_ip, dest_ip, signature_id, severity, alerts)
 WHERE d.mac = ANY(%(macs)s::macaddr[]) AND d.day > %(start)s - interval '1 day'
   AND d.day < %(end)s AND d.day + e.h * interval '1 hour' >= %(start)s
   AND d.day + e.h * interval '1 hour' < %(end)s)"""
