-- The packed days' entries back as hourly rows, then the table gone.
-- The hourly partitions of the packed days were dropped: made again where none covers a day.
DO $$
DECLARE packed_day timestamptz;
BEGIN
    FOR packed_day IN SELECT DISTINCT day FROM telemetry_flow_days LOOP
        BEGIN
            EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF telemetry_flows '
                           'FOR VALUES FROM (%L) TO (%L)',
                           'telemetry_flows_p' || to_char(packed_day AT TIME ZONE 'UTC', 'YYYYMMDD'),
                           packed_day, packed_day + interval '1 day');
        EXCEPTION WHEN invalid_object_definition THEN NULL;  -- a partition covers it
        END;
    END LOOP;
END $$;
INSERT INTO telemetry_flows (mac, hour, app_proto, dest_port, flows)
SELECT d.mac, d.day + f.h * interval '1 hour', f.app_proto, f.dest_port, sum(f.flows)
FROM telemetry_flow_days d,
     unnest(d.hours, d.app_protos, d.dest_ports, d.flows) AS f(h, app_proto, dest_port, flows)
GROUP BY 1, 2, 3, 4
ON CONFLICT (mac, hour, app_proto, dest_port) DO NOTHING;  -- rows not dropped yet: the same
DROP TABLE telemetry_flow_days;
