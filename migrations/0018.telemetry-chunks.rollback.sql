-- Back to one row per record. Records stored in chunks are not turned back into rows: they
-- are lost with the chunk tables (export them first: `router-backend telemetry export`).
-- Row tables not yet moved into chunks are renamed back with their rows.

DROP TABLE telemetry_chunks, telemetry_alerts, telemetry_flows;

DO $$ BEGIN
    IF to_regclass('legacy_ids_events') IS NOT NULL THEN
        ALTER TABLE legacy_ids_events RENAME TO ids_events;
    ELSE
        CREATE TABLE ids_events (
            mac macaddr NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY,
            received_at timestamptz NOT NULL, event_time timestamptz, event_type text,
            src_ip inet, src_port integer, dest_ip inet, dest_port integer, proto text,
            app_proto text, signature_id bigint, severity smallint, record jsonb NOT NULL,
            PRIMARY KEY (mac, received_at, id)
        ) PARTITION BY RANGE (received_at);
        CREATE INDEX ids_events_received_at_brin ON ids_events USING brin (received_at);
        CREATE INDEX ids_events_alerts_idx ON ids_events (mac, received_at DESC)
            WHERE signature_id IS NOT NULL;
        CREATE TABLE ids_events_legacy PARTITION OF ids_events
            FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now(), 'UTC') + interval '1 day');
    END IF;
    IF to_regclass('legacy_cfm_records') IS NOT NULL THEN
        ALTER TABLE legacy_cfm_records RENAME TO cfm_records;
    ELSE
        CREATE TABLE cfm_records (
            mac macaddr NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY,
            received_at timestamptz NOT NULL, event_time timestamptz, event_type text,
            src_ip inet, src_port integer, dest_ip inet, dest_port integer, proto text,
            app_proto text, record jsonb NOT NULL,
            PRIMARY KEY (mac, received_at, id)
        ) PARTITION BY RANGE (received_at);
        CREATE INDEX cfm_records_received_at_brin ON cfm_records USING brin (received_at);
        CREATE INDEX cfm_records_flows_idx ON cfm_records (mac, received_at DESC)
            WHERE event_type IN ('flow', 'netflow');
        CREATE TABLE cfm_records_legacy PARTITION OF cfm_records
            FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now(), 'UTC') + interval '1 day');
    END IF;
END $$;
