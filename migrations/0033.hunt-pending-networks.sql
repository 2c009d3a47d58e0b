-- Issue 59. The records of each upload pending for the hunt indexer, written by the upload:
-- the indexer takes small uploads many to a transaction (up to a bound of records, so that
-- its memory follows that bound) and a large one alone (server/hunt/indexer.py). And the
-- network the upload came from (engine/addresses.network_of, as the alerts' summaries keep
-- it since issue 50), which the indexer keeps with its router's day in hunt_budgets: a hunt
-- shows the networks a router's uploads came from on the days it matched, so that an
-- investigator can tell a router framed from another address (a MAC-mode router's uploads
-- from a network it never used).
ALTER TABLE hunt_pending ADD COLUMN records integer NOT NULL DEFAULT 0,
    ADD COLUMN network cidr;
ALTER TABLE hunt_budgets ADD COLUMN networks cidr[] NOT NULL DEFAULT '{}';
