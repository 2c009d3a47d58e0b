-- Back to one plain table each, rows and ids kept (this copies every row: slow on a large
-- database, and only for going back to a release before 0014).

CREATE FUNCTION pg_temp.unpartition(parent text, columns text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    flat text := parent || '_flat';
BEGIN
    EXECUTE format('INSERT INTO %I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %I',
                   flat, columns, columns, parent);
    PERFORM setval(pg_get_serial_sequence(flat, 'id'),
                   nextval(pg_get_serial_sequence(parent, 'id')), false);
    EXECUTE format('DROP TABLE %I', parent);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', flat, parent);
    EXECUTE format('ALTER INDEX %I RENAME TO %I', flat || '_pkey', parent || '_pkey');
    EXECUTE format('ALTER SEQUENCE %I RENAME TO %I', flat || '_id_seq', parent || '_id_seq');
END $$;

CREATE TABLE ids_events_flat (
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
    PRIMARY KEY (mac, id)
);
DO $$ BEGIN PERFORM pg_temp.unpartition('ids_events', 'mac, id, received_at, event_time, event_type, '
    'src_ip, src_port, dest_ip, dest_port, proto, app_proto, signature_id, severity, record'); END $$;
CREATE INDEX ids_events_received_at_brin ON ids_events USING brin (received_at);
CREATE INDEX ids_events_alerts_idx ON ids_events (mac, received_at DESC)
    WHERE signature_id IS NOT NULL;

CREATE TABLE cfm_records_flat (
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
    PRIMARY KEY (mac, id)
);
DO $$ BEGIN PERFORM pg_temp.unpartition('cfm_records', 'mac, id, received_at, event_time, event_type, '
    'src_ip, src_port, dest_ip, dest_port, proto, app_proto, record'); END $$;
CREATE INDEX cfm_records_received_at_brin ON cfm_records USING brin (received_at);
CREATE INDEX cfm_records_flows_idx ON cfm_records (mac, received_at DESC)
    WHERE event_type IN ('flow', 'netflow');

CREATE TABLE activations_flat (
    mac           macaddr      NOT NULL,
    id            bigint       GENERATED ALWAYS AS IDENTITY,
    activated_at  timestamptz  NOT NULL DEFAULT now(),
    address       inet,
    PRIMARY KEY (mac, id)
);
DO $$ BEGIN PERFORM pg_temp.unpartition('activations', 'mac, id, activated_at, address'); END $$;
CREATE INDEX activations_activated_at_brin ON activations USING brin (activated_at);

DROP FUNCTION pg_temp.unpartition(text, text);
