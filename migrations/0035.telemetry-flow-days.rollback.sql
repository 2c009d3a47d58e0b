-- The packed days' entries back as hourly rows, then the table gone.
INSERT INTO telemetry_flows (mac, hour, app_proto, dest_port, flows)
SELECT d.mac, d.day + f.h * interval '1 hour', f.app_proto, f.dest_port, sum(f.flows)
FROM telemetry_flow_days d,
     unnest(d.hours, d.app_protos, d.dest_ports, d.flows) AS f(h, app_proto, dest_port, flows)
GROUP BY 1, 2, 3, 4
ON CONFLICT (mac, hour, app_proto, dest_port) DO UPDATE
    SET flows = telemetry_flows.flows + excluded.flows;
DROP TABLE telemetry_flow_days;
