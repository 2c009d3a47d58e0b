"""Telemetry at rest: a router's records kept as received in zstd-compressed chunks, with
what generation reads summarised per hour. `chunks.py` encodes and decodes a chunk,
`summary.py` tallies a body's records into the hourly summary rows, `compaction.py` merges
small chunks (the agent's 10-second uploads) into large ones, `batch.py` turns whole uploads
at hand into the statements that store them, `legacy.py` moves the rows of the tables of
before into chunks, `export.py` streams a router's records back out, `sql_tables.py` turns
them into rows of temporary tables for psql.
Ingestion (server/ingest/) writes chunks and summaries; their SQL is in server/db/chunks.py."""
