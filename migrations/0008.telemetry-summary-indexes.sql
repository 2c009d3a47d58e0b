-- Generation's telemetry summary reads a router's alerts and flows within the window, newest
-- first, whatever else was posted for it (issue 13: 50,000 junk records pushed the real
-- alerts out of a summary that read the newest rows of any kind).
CREATE INDEX ids_events_alerts_idx ON ids_events (mac, received_at DESC)
    WHERE signature_id IS NOT NULL;
CREATE INDEX cfm_records_flows_idx ON cfm_records (mac, received_at DESC)
    WHERE event_type IN ('flow', 'netflow');
