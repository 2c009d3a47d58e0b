-- The packed days' entries back as hourly rows, then the table gone.
-- The hourly partitions of the packed days were dropped: made again where none covers a day.
DO $$
DECLARE packed_day timestamptz;
BEGIN
    FOR packed_day IN SELECT DISTINCT day FROM telemetry_alert_days LOOP
        BEGIN
            EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF telemetry_alerts '
                           'FOR VALUES FROM (%L) TO (%L)',
                           'telemetry_alerts_p' || to_char(packed_day AT TIME ZONE 'UTC', 'YYYYMMDD'),
                           packed_day, packed_day + interval '1 day');
        EXCEPTION WHEN invalid_object_definition THEN NULL;  -- a partition covers it
        END;
    END LOOP;
END $$;
INSERT INTO telemetry_alerts (mac, hour, src_ip, dest_ip, signature_id, severity, alerts,
                              last_seen, flow_ids, network)
SELECT d.mac, d.day + a.h * interval '1 hour', a.src_ip, a.dest_ip, a.signature_id,
       a.severity, a.alerts, a.last_seen,
       ARRAY(SELECT json_array_elements_text(a.flow_ids::json)), a.network
FROM telemetry_alert_days d,
     unnest(d.hours, d.src_ips, d.dest_ips, d.signature_ids, d.severities, d.alerts,
            d.last_seen, d.flow_ids, d.networks)
     AS a(h, src_ip, dest_ip, signature_id, severity, alerts, last_seen, flow_ids, network)
ON CONFLICT (mac, hour, signature_id, src_ip, dest_ip, severity) DO NOTHING;  -- the same
DROP TABLE telemetry_alert_days;
