-- Payloads are stored as gzip-compressed canonical JSON, compressed by the generation workers.
-- Routers accept gzip, so a 200 answer sends the stored bytes as they are; PostgreSQL neither
-- parses them nor tries to compress them again (STORAGE EXTERNAL).

ALTER TABLE router_rules
    DROP COLUMN ids_payload,
    DROP COLUMN firewall_payload,
    ADD COLUMN ids_payload_gz bytea,
    ADD COLUMN firewall_payload_gz bytea;
ALTER TABLE router_rules
    ALTER COLUMN ids_payload_gz SET STORAGE EXTERNAL,
    ALTER COLUMN firewall_payload_gz SET STORAGE EXTERNAL;
