-- Notifications (the notification API). Workflow notifications written by other services
-- share this table; the listing returns every type.

CREATE TABLE notifications (
    id               uuid         PRIMARY KEY,
    user_id          text         NOT NULL,
    type             text         NOT NULL,
    channel          text         NOT NULL DEFAULT 'email',
    title            text         NOT NULL,
    message          text         NOT NULL,
    status           text         NOT NULL DEFAULT 'pending'
                                  CHECK (status IN ('pending', 'sent', 'failed')),
    read             boolean      NOT NULL DEFAULT false,
    recipient        text         NOT NULL,
    metadata         jsonb        NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz  NOT NULL DEFAULT now(),
    sent_at          timestamptz,
    attempts         integer      NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    last_error       text
);
-- The per-user feed, newest first, paged and counted from the index alone.
CREATE INDEX notifications_user_feed_idx ON notifications (user_id, created_at DESC, id DESC);
-- Deliveries to retry.
CREATE INDEX notifications_retry_idx ON notifications (next_attempt_at)
    WHERE status <> 'sent' AND next_attempt_at IS NOT NULL;
