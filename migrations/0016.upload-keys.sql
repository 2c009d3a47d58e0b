-- Issue 25. Idempotent uploads: a router's Idempotency-Key on POST /log/events or /log/cfm,
-- recorded in the same transaction as the upload's records, with a fingerprint of the
-- decoded body and the answer given, so a retry is answered the same without storing again.
-- Keys are per router and endpoint; the hourly upload-keys job deletes expired ones in
-- small batches (by created_at).
CREATE TABLE upload_keys (
    mac          macaddr      NOT NULL REFERENCES routers (mac) ON DELETE CASCADE,
    kind         text         NOT NULL CHECK (kind IN ('events', 'cfm')),
    key          text         NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint  bytea        NOT NULL,
    answer       jsonb        NOT NULL,
    created_at   timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (mac, kind, key)
);
CREATE INDEX upload_keys_created_at_idx ON upload_keys (created_at);
