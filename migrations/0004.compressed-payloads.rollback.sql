ALTER TABLE router_rules
    DROP COLUMN ids_payload_gz,
    DROP COLUMN firewall_payload_gz,
    ADD COLUMN ids_payload jsonb,
    ADD COLUMN firewall_payload jsonb;
