DROP INDEX cfm_records_flows_idx;
DROP INDEX ids_events_alerts_idx;
