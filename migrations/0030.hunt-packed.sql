-- Issue 59. The packed hunt index (server/telemetry/hunt_packing.py, hunt_blocks.py): the
-- days before today are moved out of `hunt_postings` (one row per posting, about 140 bytes
-- with its B-tree entry) into compressed blocks of columns, one per (day, bucket of the
-- values' hashes): a few bytes a posting. Hunts read both (server/hunt/sightings.py).

-- Routers numbered densely for the blocks (a list of them is small integers). A router
-- removed (`subscriptions remove`) loses its row here: its number in a block no longer
-- names it, and every hunt leaves it out (hunt_removed_routers).
CREATE TABLE hunt_routers (
    id   integer  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    mac  macaddr  NOT NULL UNIQUE
);
CREATE TABLE hunt_removed_routers (
    id   integer  PRIMARY KEY
);

-- The seed of the values' hashes (server/db/hunt.py VALUE_HASH): this installation's own,
-- so that no router can craft a name of the same hash as another value.
CREATE TABLE hunt_hash_seed (
    seed  bigint  NOT NULL
);
INSERT INTO hunt_hash_seed (seed)
SELECT ('x' || md5(gen_random_uuid()::text))::bit(64)::bigint;

-- A packed day: how many hash bits name its buckets (2^bits blocks, about
-- BLOCK_POSTINGS postings each), its postings and bytes.
CREATE TABLE hunt_packed_days (
    day        timestamptz  PRIMARY KEY,  -- the UTC day's first instant
    bits       smallint     NOT NULL CHECK (bits BETWEEN 0 AND 24),
    postings   bigint       NOT NULL,
    bytes      bigint       NOT NULL,
    packed_at  timestamptz  NOT NULL DEFAULT now()
);

-- The blocks. A day packed again (postings of an upload that ended after its day had been
-- packed) adds blocks beside the first ones: `pass` tells them apart.
CREATE TABLE hunt_packed (
    day       timestamptz  NOT NULL,
    bucket    integer      NOT NULL,  -- the value hash's top `bits` bits (signed)
    pass      smallint     NOT NULL,
    postings  integer      NOT NULL,
    block     bytea        NOT NULL,  -- zstd already: not compressed again by TOAST
    PRIMARY KEY (day, bucket, pass)
);
ALTER TABLE hunt_packed ALTER COLUMN block SET STORAGE EXTERNAL;

-- A router's postings per day, counted across processes and restarts: past
-- HUNT_POSTINGS_PER_ROUTER_DAY new ones a day, its records are still stored and the values
-- it had not posted that day are not indexed, counted here (`unindexed`) for `status` and
-- the console. Kept a week (the packing job trims it). Distributed by `mac` under Citus.
CREATE TABLE hunt_budgets (
    mac        macaddr      NOT NULL,
    day        timestamptz  NOT NULL,
    postings   integer      NOT NULL,  -- new postings written that day
    unindexed  integer      NOT NULL,  -- values past the budget, not indexed
    PRIMARY KEY (mac, day)
);
