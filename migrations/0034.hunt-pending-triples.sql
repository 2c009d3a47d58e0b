-- Issue 59. An upload of flows and plain alerts (records carrying only their two addresses
-- and a signature: most uploads) is tallied at upload, from the records ingestion parses
-- anyway, by (src_ip, dest_ip, signature id) with its records each, and announced with
-- those triples as JSON (server/hunt/postings.py PendingUpload); the indexer tallies them
-- without reading the upload's chunks back. NULL (an upload carrying protocol records, or
-- too many distinct triples, or announced before this migration): the chunks are read.
ALTER TABLE hunt_pending ADD COLUMN triples bytea;
