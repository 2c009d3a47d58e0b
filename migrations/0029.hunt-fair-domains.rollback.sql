DROP INDEX hunt_log_newest;
ALTER TABLE hunt_log DROP COLUMN matches_exact;
ALTER TABLE hunt_log DROP COLUMN router;
