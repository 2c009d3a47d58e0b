-- Idempotency keys of the send endpoints (issue 17). One row per key: the request's
-- fingerprint (endpoint and canonical body), the answer once given (NULL while the first
-- request is in progress, claimed until claimed_until), and the notification it stored.
CREATE TABLE notification_keys (
    key              text         PRIMARY KEY,
    fingerprint      text         NOT NULL,
    created_at       timestamptz  NOT NULL DEFAULT now(),
    claimed_until    timestamptz  NOT NULL,
    notification_id  uuid,
    status           smallint,
    response         jsonb
);
CREATE INDEX notification_keys_created_at_idx ON notification_keys (created_at);

-- Every delivery attempt, so a caller can see what became of a notification.
CREATE TABLE notification_deliveries (
    notification_id  uuid         NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    attempt          integer      NOT NULL,
    attempted_at     timestamptz  NOT NULL DEFAULT now(),
    outcome          text         NOT NULL CHECK (outcome IN ('sent', 'failed', 'undeliverable')),
    error            text,
    PRIMARY KEY (notification_id, attempt)
);

-- The feed index carries `read`, so the unread count and the read filter are answered from
-- the index alone.
DROP INDEX notifications_user_feed_idx;
CREATE INDEX notifications_user_feed_idx ON notifications (user_id, created_at DESC, id DESC)
    INCLUDE (read);
