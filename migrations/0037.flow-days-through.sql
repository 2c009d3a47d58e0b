-- Issue 59. The open day's hourly flow summaries packed as its hours settle, not only once
-- the day is over (server/telemetry/summary_days.py): a router-day's packed row holds the
-- entries of its hours before `through`, and its hourly rows from `through` on stay rows
-- until the next pack. A day packed whole (the only kind before) has `through` 24. At the
-- agent's cadence the open day's flow rows took 110 bytes a record by the end of the day.
ALTER TABLE telemetry_flow_days
    ADD COLUMN through smallint NOT NULL DEFAULT 24 CHECK (through BETWEEN 1 AND 24);
