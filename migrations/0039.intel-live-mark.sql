-- Issue 80. The minute's match of threat intelligence reads only what the hunt index gained
-- since its last run (server/intel/retro.py live_match): where that run's reading began.
-- One row; none before the first run (which reads every current indicator once).
CREATE TABLE intel_live_mark (
    one    boolean      PRIMARY KEY DEFAULT true CHECK (one),
    since  timestamptz  NOT NULL
);
