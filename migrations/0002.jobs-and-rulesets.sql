-- Runs of background jobs (one row per run) and the cron ticks already claimed, so a job
-- runs once per tick however many server processes share this database.

CREATE TABLE job_runs (
    id           bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job          text         NOT NULL,
    started_at   timestamptz  NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    status       text         NOT NULL DEFAULT 'running'
                              CHECK (status IN ('running', 'succeeded', 'failed', 'skipped')),
    detail       jsonb        NOT NULL DEFAULT '{}'::jsonb,
    error        text
);
CREATE INDEX job_runs_job_started_at_idx ON job_runs (job, started_at);

CREATE TABLE job_ticks (
    job          text         NOT NULL,
    tick         timestamptz  NOT NULL,
    claimed_at   timestamptz  NOT NULL DEFAULT now(),
    claimed_by   text         NOT NULL,
    PRIMARY KEY (job, tick)
);
