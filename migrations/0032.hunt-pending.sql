-- Issue 59. Postings written by the hunt indexer (server/hunt/indexer.py), not in the
-- upload's transaction: an upload adds one row here beside its chunks, and the indexer
-- reads its chunks, writes their postings and deletes the row in one transaction. A crash
-- at any moment leaves the upload either pending or indexed; a replayed upload stores no
-- chunk and no row. Compaction leaves a pending upload's chunks alone
-- (server/db/chunks.py), so they are found by (mac, kind, received_at) as written.
-- Distributed by `mac` under Citus, with the router's chunks.
CREATE TABLE hunt_pending (
    mac          macaddr      NOT NULL,
    kind         text         NOT NULL,
    received_at  timestamptz  NOT NULL,  -- the upload's chunks' received_at
    written_at   timestamptz  NOT NULL DEFAULT clock_timestamp(),  -- its postings' time
    PRIMARY KEY (mac, kind, received_at)
);
CREATE INDEX hunt_pending_written ON hunt_pending (written_at);
