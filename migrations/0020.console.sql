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

-- Uploads per minute beside the records they carried, for the console's fleet charts.
ALTER TABLE telemetry_minutes ADD COLUMN uploads bigint NOT NULL DEFAULT 0;
