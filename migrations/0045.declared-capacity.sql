-- Issue 82. What each router last declared it holds (Router-Capacity on its polls of
-- /rules/last_updated, server/generation/capacity_sql.py): the IDS rules its Suricata loads,
-- the entries one of its firewall sets holds, whether its Suricata has JA4. Its own payloads
-- are generated within them (engine/generate.py). NULL: not declared (the operator's
-- RULE_GENERATION_SAMPLE_COUNT and RULE_GENERATION_FIREWALL_MAX_ENTRIES). On the
-- generation's own row: the generation reads it with its lease, the poll writes it only when
-- it changed.
ALTER TABLE generation_queue
    ADD COLUMN declared_rules bigint,
    ADD COLUMN declared_sets  bigint,
    ADD COLUMN declared_ja4   boolean NOT NULL DEFAULT false;
