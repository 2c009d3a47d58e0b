-- Issue 33. The three kinds of leased work share one mechanism (server/db/leases.py) and
-- its columns: when a row is due, who holds its lease and until when, its attempts and
-- last error.
-- A notification's retry claim is a lease of its own instead of a due time moved ahead.
ALTER TABLE notifications ADD COLUMN claimed_until timestamptz;
-- A scheduled job's tick is leased while it runs (a claimant that dies leaves it to another
-- process once the lease runs out) and retried from the database, not from the claimant's
-- memory. next_due_at NULL: done (or given up); ticks claimed before are done.
ALTER TABLE job_ticks
    ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    ADD COLUMN claimed_until timestamptz,
    ADD COLUMN next_due_at timestamptz,
    ADD COLUMN attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN last_error text,
    ALTER COLUMN claimed_by DROP NOT NULL;
CREATE INDEX job_ticks_due_idx ON job_ticks (job, next_due_at) WHERE next_due_at IS NOT NULL;
