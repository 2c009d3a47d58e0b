-- Routers, telemetry, activations and the per-router rule payloads.
-- Every telemetry table carries the router MAC in its primary key so it can be
-- distributed by MAC (for example with Citus) when one database server is not enough.

CREATE TABLE routers (
    mac            macaddr      PRIMARY KEY,
    registered_at  timestamptz  NOT NULL DEFAULT now(),
    registered_by  text         NOT NULL DEFAULT 'auto'
                                CHECK (registered_by IN ('auto', 'operator')),
    note           text
);

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
    PRIMARY KEY (mac, id)
);
-- Retention deletes by receive time; BRIN stays tiny and cheap to maintain on append-only data.
CREATE INDEX ids_events_received_at_brin ON ids_events USING brin (received_at);

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
    PRIMARY KEY (mac, id)
);
CREATE INDEX cfm_records_received_at_brin ON cfm_records USING brin (received_at);

CREATE TABLE activations (
    mac           macaddr      NOT NULL,
    id            bigint       GENERATED ALWAYS AS IDENTITY,
    activated_at  timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (mac, id)
);
CREATE INDEX activations_activated_at_brin ON activations USING brin (activated_at);

CREATE TABLE router_rules (
    mac                  macaddr      PRIMARY KEY,
    ids_payload          jsonb,
    ids_etag             text,
    ids_updated_at       timestamptz,
    firewall_payload     jsonb,
    firewall_etag        text,
    firewall_updated_at  timestamptz
);
