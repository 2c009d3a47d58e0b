-- Issue 52. The hunt index (server/db/hunt.py): one row per (kind, value, day, router) of
-- every indicator a stored record carried (server/hunt/indicators.py), written with the
-- upload; kept HUNT_RETENTION_DAYS, beyond the records themselves. Partitioned by the UTC day
-- the records were received, like telemetry (server/db/partitions.py); distributed by `mac`
-- under Citus. `value` in byte order, so that a domain (labels reversed) and every name
-- under it are one range of the primary key.
CREATE TABLE hunt_postings (
    day         timestamptz  NOT NULL,  -- the UTC day's first instant
    kind        "char"       NOT NULL,  -- i ip, d domain, 3 ja3, 4 ja4, s sid, h sha256
    value       text         COLLATE "C" NOT NULL,
    mac         macaddr      NOT NULL,
    first_seen  timestamptz  NOT NULL,  -- the first upload that day carrying it
    last_seen   timestamptz  NOT NULL,
    records     integer      NOT NULL,  -- how many of that day's records carried it
    PRIMARY KEY (kind, value, day, mac)
) PARTITION BY RANGE (day);

-- A partition for the days before this migration, as 0014 and 0019 made for theirs.
CREATE TABLE hunt_postings_legacy PARTITION OF hunt_postings
    FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now(), 'UTC') + interval '1 day');

-- Every hunt, as asked: who, when, what, how many matches (docs/security.md).
CREATE TABLE hunt_log (
    id          bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    asked_at    timestamptz  NOT NULL DEFAULT now(),
    asked_by    text         NOT NULL,  -- shell:<login> or console:<user>
    via         text         NOT NULL CHECK (via IN ('command', 'console')),
    indicators  jsonb        NOT NULL,  -- [{"kind": ..., "value": ...}, ...]
    since       date         NOT NULL,
    until       date         NOT NULL,
    matches     integer      NOT NULL
);
