-- Issue 35. What operators changed by hand (rule overrides, allowlist entries, enrollment
-- resets), from the console or from the commands: who, when, what, and for which router.
CREATE TABLE tuning_changes (
    id       bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    made_at  timestamptz  NOT NULL DEFAULT now(),
    made_by  text         NOT NULL,
    action   text         NOT NULL,
    detail   text         NOT NULL,
    mac      macaddr
);
CREATE INDEX tuning_changes_mac_idx ON tuning_changes (mac, id);

-- For the console's fleet charts: uploads per minute beside the records they carried, and
-- rules polls (/rules/last_updated calls) per minute, counted by the servers as they answer
-- (server/ingest/tally.py) instead of counting a day of activations.
ALTER TABLE telemetry_minutes ADD COLUMN uploads bigint NOT NULL DEFAULT 0;
CREATE TABLE poll_minutes (
    minute  timestamptz  PRIMARY KEY,
    polls   bigint       NOT NULL
);
