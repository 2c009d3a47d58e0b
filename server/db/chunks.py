"""The SQL of telemetry at rest (migration 0018): chunk rows, the hourly summary rows that
ingestion adds to, and what export, compaction and generation read of them.

Parameters shared by the statements: %(mac)s, %(kind)s; a chunk's (Chunk.params in
server/telemetry/chunks.py) and a summary's (Summary.params in server/telemetry/summary.py).
"""

from __future__ import annotations

from server.db.upload_keys import INSERT_KEY

# Each INSERT ... SELECT ends in `{guard}`: empty, or a WHERE that stores nothing unless
# the upload's Idempotency-Key was new (see store_statement).
_INSERT_CHUNK = """INSERT INTO telemetry_chunks (mac, kind, received_at, first_received_at,
    records, upload_times, upload_records, body)
SELECT %(mac)s, %(kind)s, %(received_at)s, %(first_received_at)s, %(records)s,
    %(upload_times)s::timestamptz[], %(upload_records)s::integer[], %(body)s {guard}"""

_ADD_ALERTS = """INSERT INTO telemetry_alerts AS t (mac, hour, src_ip, dest_ip, signature_id,
    severity, alerts, last_seen, flow_ids)
SELECT %(mac)s, %(hour)s, a.src::inet, a.dest::inet, a.sid, a.severity, a.alerts,
    coalesce(a.last_seen, %(summarised_at)s), a.flow_ids
FROM jsonb_to_recordset(%(alerts)s::jsonb) AS a(sid bigint, src text, dest text,
    severity smallint, alerts integer, flow_ids text[], last_seen timestamptz) {guard}
ON CONFLICT (mac, hour, signature_id, src_ip, dest_ip, severity) DO UPDATE SET
    alerts = t.alerts + excluded.alerts, last_seen = greatest(t.last_seen, excluded.last_seen),
    flow_ids = CASE WHEN cardinality(t.flow_ids) >= %(flow_ids_kept)s THEN t.flow_ids ELSE
        ARRAY(SELECT DISTINCT f FROM unnest(t.flow_ids || excluded.flow_ids) f
              LIMIT %(flow_ids_kept)s) END"""

_ADD_FLOWS = """INSERT INTO telemetry_flows AS t (mac, hour, app_proto, dest_port, flows)
SELECT %(mac)s, %(hour)s, f.app_proto, f.dest_port, f.flows
FROM jsonb_to_recordset(%(flows)s::jsonb) AS f(app_proto text, dest_port integer,
    flows integer) {guard}
ON CONFLICT (mac, hour, app_proto, dest_port) DO UPDATE SET flows = t.flows + excluded.flows"""

_KEY_IS_NEW = "WHERE EXISTS (SELECT 1 FROM key)"


def store_statement(chunk: bool, summary: bool, key: bool) -> str:
    """One statement writing a chunk, a summary and an upload key, each when asked for; with
    the key, the rest only when the key was new. It returns one row: the keys recorded."""
    guard = _KEY_IS_NEW if key else ""
    parts = [f"key AS ({INSERT_KEY})"] if key else []
    if chunk:
        parts.append(f"chunk AS ({_INSERT_CHUNK.format(guard=guard)})")
    if summary:
        parts.append(f"alerts AS ({_ADD_ALERTS.format(guard=guard)})")
        parts.append(f"flows AS ({_ADD_FLOWS.format(guard=guard)})")
    keys = "(SELECT count(*) FROM key)" if key else "1"
    return f"WITH {', '.join(parts)} SELECT {keys}"


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
TAKE_SMALL_CHUNKS = """DELETE FROM {partition}
WHERE mac = %(mac)s AND (mac, kind, received_at, id) IN (
    SELECT mac, kind, received_at, id FROM {partition}
    WHERE mac = %(mac)s AND kind = %(kind)s AND received_at < %(settled)s
      AND records < %(size)s
    ORDER BY received_at, id LIMIT %(chunks)s)
RETURNING received_at, id, upload_times, upload_records, body"""

# Moving the row tables of before (server/telemetry/legacy.py), a batch at a time: the next
# rows' keys and sizes, then those of them that fit the batch taken out.
NEXT_LEGACY_ROWS = """SELECT mac::text, received_at, id, octet_length(record::text)
FROM {table} ORDER BY mac, received_at, id LIMIT %(rows)s"""
TAKE_LEGACY_ROWS = """DELETE FROM {table} WHERE (mac, received_at, id) IN (
    SELECT * FROM unnest(%(macs)s::macaddr[], %(times)s::timestamptz[], %(ids)s::bigint[]))
RETURNING mac::text, received_at, id, record::text"""


def insert_chunk_statement() -> str:
    return store_statement(chunk=True, summary=False, key=False)


def insert_summary_statement() -> str:
    return store_statement(chunk=False, summary=True, key=False)
