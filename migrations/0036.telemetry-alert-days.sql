-- Issue 59. A router's hourly alert summaries of a day the fleet job no longer reads
-- (FLEET_WINDOW_HOURS) packed into one row, as migration 0035 packs the flows: an entry of
-- each array for each hourly row of the day (server/telemetry/summary_days.py). Generation
-- and the console's router page read both (server/telemetry/sql.py ALERTS_IN_WINDOW).
-- Partitioned by day, kept as long as the hourly rows; distributed by `mac` under Citus.
CREATE TABLE telemetry_alert_days (
    mac            macaddr        NOT NULL,
    day            timestamptz    NOT NULL,  -- the UTC day's start
    hours          smallint[]     NOT NULL,  -- each hourly row's hour of the day, 0-23
    src_ips        inet[]         NOT NULL,  -- ... its source, or NULL
    dest_ips       inet[]         NOT NULL,  -- ... its destination, or NULL
    signature_ids  bigint[]       NOT NULL,
    severities     smallint[]     NOT NULL,  -- ... or NULL
    alerts         integer[]      NOT NULL,
    last_seen      timestamptz[]  NOT NULL,
    flow_ids       text[]         NOT NULL,  -- ... its distinct flow ids, as a JSON array
    networks       cidr[]         NOT NULL,  -- ... its reporter network, or NULL
    PRIMARY KEY (mac, day)
) PARTITION BY RANGE (day);
CREATE TABLE telemetry_alert_days_legacy PARTITION OF telemetry_alert_days
    FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now(), 'UTC') + interval '1 day');
