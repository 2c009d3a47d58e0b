DROP TABLE poll_minutes;
ALTER TABLE telemetry_minutes DROP COLUMN uploads;
DROP TABLE tuning_changes;
