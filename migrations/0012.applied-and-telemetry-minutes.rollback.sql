DROP INDEX notifications_undelivered_idx;
DROP TABLE telemetry_minutes;
DROP TABLE router_applied;
