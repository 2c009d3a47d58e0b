-- Issue 45. A primary key on every distributed table, so that Citus's default shard move
-- (logical replication, which needs a replica identity on every table it moves) works on our
-- schema, today and for every partition made later (a partition inherits its parent's
-- primary key, while REPLICA IDENTITY FULL set by hand did not carry over, and on PostgreSQL 15 it
-- makes the target look each replicated update up by a scan). The three tables whose unique
-- keys hold nullable columns get a surrogate `id` from a sequence, the primary key being
-- (mac, <its time>, id): the partition key and the distribution column must be in it.
--
-- Rows stored before get as `id` a 64-bit hash of the columns their unique key holds beside
-- (mac, <time>), which that key makes unique within (mac, <time>): an immutable expression,
-- so that Citus runs the update on the workers' shards inside this migration's transaction
-- (it refuses nextval() in an UPDATE of a distributed table). New rows take the sequence
-- (1, 2, ..., under Citus from each node's own range).

CREATE SEQUENCE telemetry_alerts_id_seq AS bigint;
ALTER TABLE telemetry_alerts ADD COLUMN id bigint;
ALTER TABLE telemetry_alerts ALTER COLUMN id SET DEFAULT nextval('telemetry_alerts_id_seq');
UPDATE telemetry_alerts SET id = hashtextextended(coalesce(signature_id::text, '') || '|' || coalesce(host(src_ip), '') || '|' || coalesce(host(dest_ip), '') || '|' || coalesce(severity::text, ''), 0);
ALTER TABLE telemetry_alerts ALTER COLUMN id SET NOT NULL;
ALTER TABLE telemetry_alerts ADD PRIMARY KEY (mac, hour, id);
ALTER SEQUENCE telemetry_alerts_id_seq OWNED BY telemetry_alerts.id;
CREATE SEQUENCE telemetry_flows_id_seq AS bigint;
ALTER TABLE telemetry_flows ADD COLUMN id bigint;
ALTER TABLE telemetry_flows ALTER COLUMN id SET DEFAULT nextval('telemetry_flows_id_seq');
UPDATE telemetry_flows SET id = hashtextextended(coalesce(app_proto, '') || '|' || coalesce(dest_port::text, ''), 0);
ALTER TABLE telemetry_flows ALTER COLUMN id SET NOT NULL;
ALTER TABLE telemetry_flows ADD PRIMARY KEY (mac, hour, id);
ALTER SEQUENCE telemetry_flows_id_seq OWNED BY telemetry_flows.id;
CREATE SEQUENCE activation_days_id_seq AS bigint;
ALTER TABLE activation_days ADD COLUMN id bigint;
ALTER TABLE activation_days ALTER COLUMN id SET DEFAULT nextval('activation_days_id_seq');
UPDATE activation_days SET id = hashtextextended(coalesce(host(address), ''), 0);
ALTER TABLE activation_days ALTER COLUMN id SET NOT NULL;
ALTER TABLE activation_days ADD PRIMARY KEY (mac, day, id);
ALTER SEQUENCE activation_days_id_seq OWNED BY activation_days.id;

-- The merge of an alert summary row's distinct flow ids (at most `most`), as ingestion's
-- ON CONFLICT DO UPDATE needs it: a function, because Citus refuses a subquery within an
-- INSERT that it plans onto one shard (server/db/chunks.py), and runs a function there.
CREATE FUNCTION merged_flow_ids(kept text[], added text[], most integer) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF cardinality(kept) >= most THEN
        RETURN kept;
    END IF;
    RETURN ARRAY(SELECT DISTINCT f FROM unnest(kept || added) AS f LIMIT most);
END $$;
