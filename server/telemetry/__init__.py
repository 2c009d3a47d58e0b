"""Telemetry at rest: a router's records kept as received in zstd-compressed chunks, with
what generation reads summarised per hour. `extract.py` checks one record and reads its
fields, `chunks.py` encodes and decodes a chunk, `summary.py` tallies a body's records into
the hourly summary rows, `indicators.py` says what a record carries for the hunt (and how
each value is stored), `postings.py` tallies an upload's postings in the hunt index,
`writer.py` writes an upload's chunks, summary and postings in one
transaction as its body streams in, `hunt_packing.py` packs the hunt index's past days into
compressed blocks (`hunt_blocks.py`, their layout), `compaction.py` merges
small chunks (the agent's 10-second uploads) into large ones, `batch.py` turns whole uploads
at hand into the statements that store them, `legacy.py` moves the rows of the tables of
before into chunks, `export.py` streams a router's records back out, `sql_tables.py` turns
them into rows of temporary tables for psql.
Ingestion (server/ingest/) streams requests into the writer; the SQL is in server/telemetry/sql.py
and server/db/telemetry.py."""
