-- Issue 32. Telemetry kept in compressed chunks: a router's records, as received, many to a
-- row, zstd-compressed by the service (server/telemetry/chunks.py), with what generation
-- reads summarised per hour at ingestion (telemetry_alerts, telemetry_flows) instead of
-- one jsonb row per record. All three tables are partitioned by day like the rest
-- (server/db/partitions.py) and their first partition, `<table>_legacy`, covers everything
-- before tomorrow (UTC), so that records moved from the tables of before land in it.
--
-- The row tables of before become `legacy_ids_events` and `legacy_cfm_records`; empty (a
-- new database) they are dropped here, otherwise the compaction job moves their rows into
-- chunks in batches and drops them once empty (server/telemetry/legacy.py).

CREATE TABLE telemetry_chunks (
    mac                macaddr        NOT NULL,
    kind               text           NOT NULL CHECK (kind IN ('events', 'cfm')),
    received_at        timestamptz    NOT NULL,  -- its newest upload: partition and retention
    id                 bigint         GENERATED ALWAYS AS IDENTITY,
    first_received_at  timestamptz    NOT NULL,  -- its oldest upload
    records            integer        NOT NULL CHECK (records > 0),
    upload_times       timestamptz[]  NOT NULL,  -- each upload's receive time, oldest first
    upload_records     integer[]      NOT NULL,  -- ... and how many of the records it sent
    body               bytea          NOT NULL,  -- zstd: the records, one per line
    PRIMARY KEY (mac, kind, received_at, id)
) PARTITION BY RANGE (received_at);
-- Already compressed: TOAST moves it out of line but does not try to compress it again.
ALTER TABLE telemetry_chunks ALTER COLUMN body SET STORAGE EXTERNAL;

-- Alerts (records with alert.signature_id, sent to /log/events) per router and hour, by
-- source, destination, signature and severity: counts, the newest upload, distinct flows.
CREATE TABLE telemetry_alerts (
    mac           macaddr      NOT NULL,
    hour          timestamptz  NOT NULL,
    src_ip        inet,
    dest_ip       inet,
    signature_id  bigint       NOT NULL,
    severity      smallint,
    alerts        integer      NOT NULL,
    last_seen     timestamptz  NOT NULL,
    flow_ids      text[]       NOT NULL  -- distinct flow_id values, at most 64 a row
) PARTITION BY RANGE (hour);
CREATE UNIQUE INDEX telemetry_alerts_key ON telemetry_alerts
    (mac, hour, signature_id, src_ip, dest_ip, severity) NULLS NOT DISTINCT;

-- Flows (event_type flow or netflow, sent to /log/cfm) per router and hour, by application
-- protocol and by destination port (each row names one of the two).
CREATE TABLE telemetry_flows (
    mac        macaddr      NOT NULL,
    hour       timestamptz  NOT NULL,
    app_proto  text,
    dest_port  integer,
    flows      integer      NOT NULL,
    CHECK ((app_proto IS NULL) <> (dest_port IS NULL))
) PARTITION BY RANGE (hour);
CREATE UNIQUE INDEX telemetry_flows_key ON telemetry_flows
    (mac, hour, app_proto, dest_port) NULLS NOT DISTINCT;

CREATE TABLE telemetry_chunks_legacy PARTITION OF telemetry_chunks
    FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now(), 'UTC') + interval '1 day');
CREATE TABLE telemetry_alerts_legacy PARTITION OF telemetry_alerts
    FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now(), 'UTC') + interval '1 day');
CREATE TABLE telemetry_flows_legacy PARTITION OF telemetry_flows
    FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now(), 'UTC') + interval '1 day');

ALTER TABLE ids_events RENAME TO legacy_ids_events;
ALTER TABLE cfm_records RENAME TO legacy_cfm_records;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM legacy_ids_events) THEN DROP TABLE legacy_ids_events; END IF;
    IF NOT EXISTS (SELECT 1 FROM legacy_cfm_records) THEN DROP TABLE legacy_cfm_records; END IF;
END $$;
