-- Issue 60. Threat intelligence (server/intel/): feeds fetched by a job, their indicators
-- delivered to every router (GET /rules/intel) and retro-hunted over the hunt index; the
-- sightings told to the routers' owners.

-- A feed: where it comes from, how it is read, and how its last fetches went. `url` NULL:
-- a feed filled only by `intel import` (hosts without internet).
CREATE TABLE intel_feeds (
    name             text         PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    url              text,
    format           text         NOT NULL,
    kind             text,        -- a plain feed's kind when not inferred per line
    confidence       smallint     NOT NULL DEFAULT 50 CHECK (confidence BETWEEN 0 AND 100),
    added_at         timestamptz  NOT NULL DEFAULT now(),
    added_by         text         NOT NULL,
    etag             text,        -- the last good fetch's validators (conditional GET)
    last_modified    text,
    attempted_at     timestamptz,
    succeeded_at     timestamptz, -- the last version swapped in (or confirmed unchanged)
    error            text,        -- the last attempt's, NULL when it succeeded
    lines            integer      NOT NULL DEFAULT 0,  -- of the version in use
    refused          integer      NOT NULL DEFAULT 0,  -- its lines that gave no indicator
    refusals         jsonb        NOT NULL DEFAULT '{}'::jsonb, -- reason -> count
    indicators       integer      NOT NULL DEFAULT 0
);

-- A feed's indicators, the version in use: replaced whole by a good fetch. `code` and `value`
-- are the hunt index's (server/telemetry/indicators.py); `value` of a network is its CIDR.
CREATE TABLE intel_indicators (
    feed        text         NOT NULL REFERENCES intel_feeds ON DELETE CASCADE,
    kind        text         NOT NULL,
    value       text         NOT NULL COLLATE "C",
    confidence  smallint     NOT NULL,
    first_seen  timestamptz  NOT NULL,  -- by the feed (else when we first took it)
    last_seen   timestamptz  NOT NULL,
    expires_at  timestamptz  NOT NULL,
    added_at    timestamptz  NOT NULL DEFAULT now(),  -- when this feed first brought it
    hunted_at   timestamptz,             -- when it was last retro-hunted (NULL: not yet)
    PRIMARY KEY (feed, kind, value)
);
CREATE INDEX intel_indicators_value ON intel_indicators (kind, value);
CREATE INDEX intel_indicators_unhunted ON intel_indicators (added_at) WHERE hunted_at IS NULL;

-- Operators' decisions on one value, whatever feed brings it: `suppressed` (never delivered,
-- never sighted) or `released` (delivered although more of the fleet saw it than
-- INTEL_PREVALENCE_MAX allows). `held`: the job's own, a value over that prevalence, until
-- an operator releases or suppresses it.
CREATE TABLE intel_decisions (
    kind        text         NOT NULL,
    value       text         NOT NULL COLLATE "C",
    decision    text         NOT NULL CHECK (decision IN ('suppressed', 'released', 'held')),
    routers     integer,     -- held: routers that saw it in the last 7 days
    note        text         NOT NULL DEFAULT '',
    decided_by  text         NOT NULL,
    decided_at  timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, value)
);

-- What a router saw of an indicator: one row per (indicator, router), whatever feeds name it
-- and however often it is hunted again. Distributed by `mac` under Citus.
CREATE TABLE intel_sightings (
    mac          macaddr      NOT NULL,
    kind         text         NOT NULL,
    value        text         NOT NULL COLLATE "C",
    source       text         NOT NULL,  -- the feed that named it first
    first_seen   timestamptz  NOT NULL,
    last_seen    timestamptz  NOT NULL,
    days         integer      NOT NULL,
    records      bigint       NOT NULL,
    found_at     timestamptz  NOT NULL DEFAULT now(),
    told_at      timestamptz,             -- its notification stored (NULL: no owner yet)
    PRIMARY KEY (mac, kind, value)
);
CREATE INDEX intel_sightings_untold ON intel_sightings (found_at) WHERE told_at IS NULL;

-- Who owns a router: the notification service's user and address its sightings go to.
ALTER TABLE routers ADD COLUMN owner_user text;
ALTER TABLE routers ADD COLUMN owner_email text;

-- Every feed change, fetch, suppression and retro-hunt, as hunts are kept (docs/security.md).
CREATE TABLE intel_log (
    id      bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz  NOT NULL DEFAULT now(),
    actor   text         NOT NULL,  -- shell:<login>, console:<user>, job:<name>
    action  text         NOT NULL,
    detail  jsonb        NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX intel_log_newest ON intel_log (at DESC, id DESC);
