-- The entries of days packed in part back as hourly rows (their hours' partition is the
-- open day's, still there), their packed rows gone, then the column.
INSERT INTO telemetry_flows (mac, hour, app_proto, dest_port, flows)
SELECT d.mac, d.day + f.h * interval '1 hour', f.app_proto, f.dest_port, sum(f.flows)
FROM telemetry_flow_days d,
     unnest(d.hours, d.app_protos, d.dest_ports, d.flows) AS f(h, app_proto, dest_port, flows)
WHERE d.through < 24
GROUP BY 1, 2, 3, 4
ON CONFLICT (mac, hour, app_proto, dest_port) DO NOTHING;
DELETE FROM telemetry_flow_days WHERE through < 24;
ALTER TABLE telemetry_flow_days DROP COLUMN through;
