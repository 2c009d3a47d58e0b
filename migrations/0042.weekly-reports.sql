-- Issue 83. Each owner's weekly report (server/reports/): when they want it (a weekday and an
-- hour of their time zone; no row: the default, docs/notification-api.md) or that they do
-- not, and each report made, one per owner and week's end, in the transaction that stores
-- its notification, so a rerun or a second process tells nobody twice. Keyed by the owner's
-- user id (routers.owner_user), not by router: one report names all of an owner's routers.
-- Under Citus both stay on the coordinator.
CREATE TABLE owner_reports (
    user_id     text         PRIMARY KEY,
    weekly      boolean      NOT NULL DEFAULT true,
    weekday     smallint     NOT NULL DEFAULT 1 CHECK (weekday BETWEEN 1 AND 7),  -- ISO: 1 Monday
    hour        smallint     NOT NULL DEFAULT 8 CHECK (hour BETWEEN 0 AND 23),
    zone        text         NOT NULL DEFAULT 'UTC',
    updated_at  timestamptz  NOT NULL DEFAULT now()
);
CREATE TABLE weekly_reports (
    user_id          text         NOT NULL,
    week_end         timestamptz  NOT NULL,
    notification_id  uuid         NOT NULL,
    routers          integer      NOT NULL,
    made_at          timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, week_end)
);
CREATE INDEX weekly_reports_latest ON weekly_reports (user_id, week_end DESC);
