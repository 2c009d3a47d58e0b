-- What each router reports it loaded (POST /rules/applied, issue 16): the latest report.
CREATE TABLE router_applied (
    mac            macaddr      PRIMARY KEY REFERENCES routers (mac) ON DELETE CASCADE,
    ids_etag       text,
    firewall_etag  text,
    ok             boolean      NOT NULL,
    detail         text,
    reported_at    timestamptz  NOT NULL DEFAULT now()
);

-- Telemetry records accepted and rejected per minute and kind, added to by every server
-- process from its counters every few seconds (the rejected ones are stored nowhere else).
CREATE TABLE telemetry_minutes (
    minute    timestamptz  NOT NULL,
    kind      text         NOT NULL CHECK (kind IN ('events', 'cfm')),
    accepted  bigint       NOT NULL DEFAULT 0,
    rejected  bigint       NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, kind)
);

-- `router-backend status` counts undelivered notifications without reading the sent ones.
CREATE INDEX notifications_undelivered_idx ON notifications (status) WHERE status <> 'sent';
