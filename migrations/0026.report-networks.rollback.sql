DROP TABLE fleet_polled_kept;
ALTER TABLE telemetry_alerts DROP COLUMN network;
