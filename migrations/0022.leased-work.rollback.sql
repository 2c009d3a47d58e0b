DROP INDEX job_ticks_due_idx;
UPDATE job_ticks SET claimed_by = '' WHERE claimed_by IS NULL;
ALTER TABLE job_ticks
    ALTER COLUMN claimed_by SET NOT NULL,
    DROP COLUMN last_error,
    DROP COLUMN attempts,
    DROP COLUMN next_due_at,
    DROP COLUMN claimed_until,
    DROP COLUMN id;
ALTER TABLE notifications DROP COLUMN claimed_until;
