-- Telemetry and activations partitioned by time (issue 15): retention drops whole partitions
-- instead of deleting rows one by one. Every key and index still starts with the MAC, so the
-- tables can be distributed by it (docs/scaling.md).
--
-- Each existing table is kept as it is and becomes the first partition, `<table>_legacy`,
-- covering everything before tomorrow (UTC): no row is copied. What the conversion costs is
-- one pass to build its new primary key (mac, time, id) and one to check its bound; the
-- service creates the daily partitions from tomorrow on (server/db/partitions.py) and
-- retention drops `<table>_legacy` once all of it is older than the limit.

CREATE FUNCTION pg_temp.adopt_as_legacy_partition(parent text, time_column text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    legacy    text := parent || '_legacy';
    bound     timestamptz := date_trunc('day', now(), 'UTC') + interval '1 day';
    next_id   bigint;
BEGIN
    -- Ids go on from where the old table's identity stopped.
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s',
                   pg_get_serial_sequence(legacy, 'id')) INTO next_id;
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id RESTART WITH %s', parent, next_id);
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP IDENTITY', legacy);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', legacy, legacy || '_old_pkey');
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (mac, %I, id)',
                   legacy, legacy || '_pkey', time_column);
    -- A valid CHECK that implies the partition bound spares ATTACH a second scan.
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I < %L)',
                   legacy, legacy || '_bound', time_column, bound);
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
                   parent, legacy, bound);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', legacy, legacy || '_bound');
END $$;

-- IDS events
ALTER TABLE ids_events RENAME TO ids_events_legacy;
ALTER INDEX ids_events_pkey RENAME TO ids_events_legacy_old_pkey;
ALTER INDEX ids_events_received_at_brin RENAME TO ids_events_legacy_received_at_brin;
ALTER INDEX ids_events_alerts_idx RENAME TO ids_events_legacy_alerts_idx;
CREATE TABLE ids_events (
    mac           macaddr      NOT NULL,
    id            bigint       GENERATED ALWAYS AS IDENTITY,
    received_at   timestamptz  NOT NULL,
    event_time    timestamptz,
    event_type    text,
    src_ip        inet,
    src_port      integer,
    dest_ip       inet,
    dest_port     integer,
    proto         text,
    app_proto     text,
    signature_id  bigint,
    severity      smallint,
    record        jsonb        NOT NULL,
    PRIMARY KEY (mac, received_at, id)
) PARTITION BY RANGE (received_at);
-- Retention trims the one partition that straddles its cut-off by receive time.
CREATE INDEX ids_events_received_at_brin ON ids_events USING brin (received_at);
CREATE INDEX ids_events_alerts_idx ON ids_events (mac, received_at DESC)
    WHERE signature_id IS NOT NULL;
DO $$ BEGIN PERFORM pg_temp.adopt_as_legacy_partition('ids_events', 'received_at'); END $$;

-- CFM records
ALTER TABLE cfm_records RENAME TO cfm_records_legacy;
ALTER INDEX cfm_records_pkey RENAME TO cfm_records_legacy_old_pkey;
ALTER INDEX cfm_records_received_at_brin RENAME TO cfm_records_legacy_received_at_brin;
ALTER INDEX cfm_records_flows_idx RENAME TO cfm_records_legacy_flows_idx;
CREATE TABLE cfm_records (
    mac           macaddr      NOT NULL,
    id            bigint       GENERATED ALWAYS AS IDENTITY,
    received_at   timestamptz  NOT NULL,
    event_time    timestamptz,
    event_type    text,
    src_ip        inet,
    src_port      integer,
    dest_ip       inet,
    dest_port     integer,
    proto         text,
    app_proto     text,
    record        jsonb        NOT NULL,
    PRIMARY KEY (mac, received_at, id)
) PARTITION BY RANGE (received_at);
CREATE INDEX cfm_records_received_at_brin ON cfm_records USING brin (received_at);
CREATE INDEX cfm_records_flows_idx ON cfm_records (mac, received_at DESC)
    WHERE event_type IN ('flow', 'netflow');
DO $$ BEGIN PERFORM pg_temp.adopt_as_legacy_partition('cfm_records', 'received_at'); END $$;

-- Activations: the primary key (mac, activated_at, id) also finds a router's newest ones.
ALTER TABLE activations RENAME TO activations_legacy;
ALTER INDEX activations_pkey RENAME TO activations_legacy_old_pkey;
ALTER INDEX activations_activated_at_brin RENAME TO activations_legacy_activated_at_brin;
CREATE TABLE activations (
    mac           macaddr      NOT NULL,
    id            bigint       GENERATED ALWAYS AS IDENTITY,
    activated_at  timestamptz  NOT NULL DEFAULT now(),
    address       inet,
    PRIMARY KEY (mac, activated_at, id)
) PARTITION BY RANGE (activated_at);
CREATE INDEX activations_activated_at_brin ON activations USING brin (activated_at);
DO $$ BEGIN PERFORM pg_temp.adopt_as_legacy_partition('activations', 'activated_at'); END $$;

DROP FUNCTION pg_temp.adopt_as_legacy_partition(text, text);
