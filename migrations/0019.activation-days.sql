-- Issue 32. Activations (one row per /rules/last_updated call) kept one by one for the last
-- days only: the `activation-days` job rolls each older UTC day into one row per router and
-- address (its count, first and last time: what the access reports read) and drops that
-- day's partition of `activations`. At a poll every 5 minutes kept 400 days, a router's
-- activations took 13 MB one by one; rolled up they take some 40 KB.
CREATE TABLE activation_days (
    mac          macaddr      NOT NULL,
    day          timestamptz  NOT NULL,  -- the UTC day's first instant
    address      inet,
    activations  integer      NOT NULL,
    first_seen   timestamptz  NOT NULL,
    last_seen    timestamptz  NOT NULL
) PARTITION BY RANGE (day);
CREATE UNIQUE INDEX activation_days_key ON activation_days (mac, day, address)
    NULLS NOT DISTINCT;
CREATE TABLE activation_days_legacy PARTITION OF activation_days
    FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now(), 'UTC') + interval '1 day');

-- Activations before `detail_from` are in activation_days, from it on in activations: one
-- row, moved by the job in the transaction that rolls a day up, so that every reader sees
-- each day in exactly one of the two.
CREATE TABLE activation_rollup (
    single       boolean      PRIMARY KEY DEFAULT true CHECK (single),
    detail_from  timestamptz  NOT NULL DEFAULT '-infinity'
);
INSERT INTO activation_rollup DEFAULT VALUES;
