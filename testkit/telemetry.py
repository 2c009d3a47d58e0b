"""Stored telemetry read back for checks: every router's records in the temporary tables
`ids_events` and `cfm_records` that `router-backend telemetry sql` gives an analyst (same
module, server/telemetry/sql_tables.py), so a check is plain SQL over one row per record."""

from __future__ import annotations

import io

from server.db.location import DatabaseLocation
from server.telemetry.batch import Upload, upload_statements
from server.telemetry.export import stored_records
from server.telemetry.sql_tables import TABLES, copy_line, create_statement
from testkit.database import Sql


class StoredTelemetry(Sql):
    def prepare(self, cur) -> None:
        load_record_tables(cur, self.location)


def load_record_tables(cur, location: DatabaseLocation) -> None:
    """Create and fill the temporary tables ids_events and cfm_records in `cur`'s session."""
    cur.execute("SELECT DISTINCT mac::text FROM telemetry_chunks ORDER BY 1")
    macs = [mac for (mac,) in cur.fetchall()]
    copies = {kind: io.StringIO() for kind in TABLES}
    for mac in macs:
        for record in stored_records(location, mac):
            copies[record.kind].write(copy_line(mac, record))
    for kind, (table, _, _) in TABLES.items():
        cur.execute(create_statement(kind))
        with cur.copy(f"COPY {table} FROM STDIN") as copy:
            copy.write(copies[kind].getvalue())


def store_uploads(cur, kind: str, uploads: list[Upload], chunk_records: int) -> None:
    """Whole uploads at hand stored in `cur`'s transaction, as the compaction job leaves
    them (chunks and summaries), for benchmarks that load history."""
    for statement in upload_statements(kind, uploads, chunk_records, cur):
        cur.execute(statement)


def telemetry(sql: Sql | DatabaseLocation) -> StoredTelemetry:
    return StoredTelemetry(sql.location if isinstance(sql, Sql) else sql)


def stored_count(sql: Sql, kind: str = "events", mac: str | None = None) -> int:
    """Records stored, from the chunks' counts (no decompression)."""
    return int(sql.value("SELECT coalesce(sum(records), 0) FROM telemetry_chunks "
                         "WHERE kind = %s AND (%s::macaddr IS NULL OR mac = %s::macaddr)",
                         (kind, mac, mac)))


# The summary statement of before migration 0018 (server/generation/task.py), on the row
# tables (or the temporary ones of the same records); its 50,000-row bound left out, as no
# router of this test comes near it.
_KINDS = {"ids_events": "signature_id IS NOT NULL",
          "cfm_records": "event_type IN ('flow', 'netflow')"}


def _recent(table: str, columns: str, condition: str = "true") -> str:
    return (f"(SELECT {columns} FROM {table} WHERE mac = %(mac)s AND {_KINDS[table]} "
            f"AND {condition} AND received_at > now() - %(window)s) recent")


SUMMARY_OF_BEFORE = f"""SELECT
 (SELECT json_agg(json_build_array(sid, n, severity)) FROM (
   SELECT signature_id AS sid, count(*) AS n, coalesce(min(severity), 255) AS severity
   FROM {_recent('ids_events', 'signature_id, severity')}
   GROUP BY 1 ORDER BY 3, 2 DESC, 1 LIMIT %(sids)s) fired),
 (SELECT array_agg(app_proto) FROM (SELECT app_proto FROM
   {_recent('cfm_records', 'app_proto', "app_proto IS NOT NULL AND app_proto <> 'failed'")}
   GROUP BY app_proto ORDER BY count(*) DESC, app_proto LIMIT %(top)s) apps),
 (SELECT array_agg(dest_port) FROM (SELECT dest_port FROM
   {_recent('cfm_records', 'dest_port', 'dest_port IS NOT NULL')}
   GROUP BY dest_port ORDER BY count(*) DESC, dest_port LIMIT %(top)s) ports),
 (SELECT json_agg(json_build_array(src, dest, sid, severity, n, flows, expires)) FROM (
   SELECT host(src_ip) AS src, host(dest_ip) AS dest, signature_id AS sid,
          min(severity) AS severity, count(*) AS n, count(DISTINCT flow_id) AS flows,
          to_char((max(received_at) + %(window)s) AT TIME ZONE 'UTC',
                  'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS expires FROM
   {_recent('ids_events', "src_ip, dest_ip, signature_id, severity, received_at, "
                          "record->>'flow_id' AS flow_id", 'severity <= %(severity)s')}
   GROUP BY 1, 2, 3 ORDER BY count(*) DESC LIMIT %(alerts)s) alerts)"""
