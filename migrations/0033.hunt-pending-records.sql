-- Issue 59. The records of each upload pending for the hunt indexer, written by the upload:
-- the indexer takes small uploads many to a transaction (up to a bound of records, so that
-- its memory follows that bound) and a large one alone (server/hunt/indexer.py).
ALTER TABLE hunt_pending ADD COLUMN records integer NOT NULL DEFAULT 0;
