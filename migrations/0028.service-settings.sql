-- Issue 54. The settings the service runs with, as given (its environment, the unit's
-- EnvironmentFile, .env), recorded at each start (secrets and each process's own database
-- location left out: server/settings.py shared_with_commands); operator commands on the
-- same database act with them where they give none of their own, and say which of theirs
-- differ (ops/command.py).
CREATE TABLE service_settings (
    name         text         PRIMARY KEY,
    value        text         NOT NULL,
    recorded_at  timestamptz  NOT NULL DEFAULT now(),
    recorded_by  text         NOT NULL  -- host:pid of the process that started
);
