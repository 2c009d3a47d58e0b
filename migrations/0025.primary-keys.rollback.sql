DROP FUNCTION merged_flow_ids(text[], text[], integer);
ALTER TABLE activation_days DROP CONSTRAINT activation_days_pkey;
ALTER TABLE activation_days DROP COLUMN id;
ALTER TABLE telemetry_flows DROP CONSTRAINT telemetry_flows_pkey;
ALTER TABLE telemetry_flows DROP COLUMN id;
ALTER TABLE telemetry_alerts DROP CONSTRAINT telemetry_alerts_pkey;
ALTER TABLE telemetry_alerts DROP COLUMN id;
