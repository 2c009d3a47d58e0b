"""Stored telemetry read back for checks: every router's records in the temporary tables
`ids_events` and `cfm_records` that `router-backend telemetry sql` gives an analyst (same
module, server/telemetry/sql_tables.py), so a check is plain SQL over one row per record."""

from __future__ import annotations

import io

import psycopg2

from server.db.location import DatabaseLocation
from server.telemetry.export import stored_records
from server.telemetry.sql_tables import TABLES, copy_line, create_statement
from testkit.database import Sql


class StoredTelemetry:
    def __init__(self, location: DatabaseLocation):
        self.location = location

    def rows(self, statement: str, params=None) -> list[tuple]:
        conn = psycopg2.connect(**self.location.connect_kwargs())
        try:
            with conn, conn.cursor() as cur:
                load_record_tables(cur, self.location)
                cur.execute(statement, params)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def value(self, statement: str, params=None):
        return self.rows(statement, params)[0][0]



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
        copies[kind].seek(0)
        cur.copy_expert(f"COPY {table} FROM STDIN", copies[kind])


def telemetry(sql: Sql | DatabaseLocation) -> StoredTelemetry:
    return StoredTelemetry(sql.location if isinstance(sql, Sql) else sql)


def stored_count(sql: Sql, kind: str = "events", mac: str | None = None) -> int:
    """Records stored, from the chunks' counts (no decompression)."""
    return int(sql.value("SELECT coalesce(sum(records), 0) FROM telemetry_chunks "
                         "WHERE kind = %s AND (%s::macaddr IS NULL OR mac = %s::macaddr)",
                         (kind, mac, mac)))
