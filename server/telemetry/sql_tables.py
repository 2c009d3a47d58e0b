"""Stored records as rows of temporary tables named and shaped like the row tables of
before (`ids_events`, `cfm_records`, with `chunk_id` and `ordinal` in place of `id`), for an
analyst's psql session (`router-backend telemetry sql`): PostgreSQL cannot decompress zstd,
so the records asked for are expanded here and loaded with \\copy when psql starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import orjson

from server.telemetry.extract import CFM_COLUMNS, EVENT_COLUMNS, cfm_row, event_row, utc_text
from server.telemetry.export import StoredRecord

TABLES = {"events": ("ids_events", EVENT_COLUMNS, event_row),
          "cfm": ("cfm_records", CFM_COLUMNS, cfm_row)}
_TYPES = {"event_time": "timestamptz", "event_type": "text", "src_ip": "inet",
          "src_port": "integer", "dest_ip": "inet", "dest_port": "integer", "proto": "text",
          "app_proto": "text", "signature_id": "bigint", "severity": "smallint"}
_ESCAPES = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}


def create_statement(kind: str) -> str:
    table, columns, _ = TABLES[kind]
    typed = ", ".join(f"{name} {_TYPES[name]}" for name in columns)
    return (f"CREATE TEMP TABLE {table} (mac macaddr, chunk_id bigint, ordinal integer, "
            f"received_at timestamptz, {typed}, record jsonb)")


def copy_line(mac: str, record: StoredRecord) -> str:
    """One row in COPY's text format."""
    _, _, row_of = TABLES[record.kind]
    columns = row_of(orjson.loads(record.line))
    if columns[0] is not None:
        columns[0] = utc_text(columns[0])  # event_time
    values = [mac, record.chunk_id, record.ordinal, record.received_at.isoformat(),
              *columns, record.line.decode()]
    return "\t".join("\\N" if value is None else str(value).translate(_ESCAPES)
                     for value in values) + "\n"


def write_session(mac: str, records: Iterable[StoredRecord], folder: Path) -> tuple[Path, dict]:
    """Row files for both tables and a psql start-up file that creates and loads them;
    the start-up file and the rows loaded per table."""
    files = {kind: (folder / f"{TABLES[kind][0]}.tsv").open("w") for kind in TABLES}
    loaded = dict.fromkeys(TABLES, 0)
    try:
        for record in records:
            files[record.kind].write(copy_line(mac, record))
            loaded[record.kind] += 1
    finally:
        for handle in files.values():
            handle.close()
    start_up = folder / "psqlrc"
    start_up.write_text("\\set QUIET on\n" + "".join(
        f"{create_statement(kind)};\n\\copy {TABLES[kind][0]} FROM '{files[kind].name}'\n"
        for kind in TABLES) + "\\set QUIET off\n")
    return start_up, loaded
