"""Telemetry at rest: a router's records kept as received in zstd-compressed chunks, with
what generation reads summarised per hour. `extract.py` checks one record and reads its
fields, `chunks.py` encodes and decodes a chunk (`columns.py`: a chunk written once laid out
by column, its records cut from their shared skeletons), `summary.py` tallies a body's
records into the hourly summary rows, `indicators.py` says what a record carries for the
hunt (and how each value is stored), `writer.py` writes an upload's chunks and summary in one
transaction as its body streams in (announcing the whole upload with a statement its caller
names: the hunt's queue), `compaction.py` merges small chunks (the agent's 10-second uploads)
into large ones, `closed_days.py` gives back the space a closed day's merges left
behind (a fresh copy swapped in) and `summary_days.py` packs a closed day's hourly
summaries into a row a router, `batch.py` turns whole uploads at hand into the statements
that store them, `legacy.py` moves the rows of the tables of before into chunks, `export.py` streams a
router's records back out, `sql_tables.py` turns them into rows of temporary tables for psql.
Its SQL: `sql.py` (chunks and summaries: store, export, compaction; the window of hourly
summaries) and `upload_key_sql.py` (the uploads' idempotency keys); an upload's commit in
doubt is settled by server/db/telemetry.py. Ingestion (server/ingest/) streams requests into
the writer.
"""
