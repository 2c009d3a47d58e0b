ALTER TABLE telemetry_alerts DROP COLUMN network;
