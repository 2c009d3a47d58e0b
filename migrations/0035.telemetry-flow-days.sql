-- Issue 59. A router's hourly flow summaries of a closed day packed into one row: an entry
-- of each array for each hourly row of the day (its hour, application protocol or
-- destination port, and flows), in place of those rows (server/telemetry/flow_days.py).
-- At the agent's cadence a router-day had 528 hourly rows of about 200 bytes (heap and two
-- indexes); generation reads both (server/telemetry/sql.py FLOWS_IN_WINDOW). Partitioned
-- by day like the hourly rows, and kept as long (retention); distributed by `mac` under
-- Citus with the router's other rows.
CREATE TABLE telemetry_flow_days (
    mac         macaddr      NOT NULL,
    day         timestamptz  NOT NULL,  -- the UTC day's start
    hours       smallint[]   NOT NULL,  -- each hourly row's hour of the day, 0-23
    app_protos  text[]       NOT NULL,  -- ... its application protocol, or NULL
    dest_ports  integer[]    NOT NULL,  -- ... its destination port, or NULL
    flows       integer[]    NOT NULL,  -- ... its flows
    PRIMARY KEY (mac, day)
) PARTITION BY RANGE (day);
CREATE TABLE telemetry_flow_days_legacy PARTITION OF telemetry_flow_days
    FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now(), 'UTC') + interval '1 day');
