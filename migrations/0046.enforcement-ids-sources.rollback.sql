DELETE FROM enforcement_days WHERE list LIKE 'ids.%';
ALTER TABLE enforcement_days DROP CONSTRAINT enforcement_days_list_check;
ALTER TABLE enforcement_days ADD CONSTRAINT enforcement_days_list_check CHECK (
    list IN ('firewall', 'fleet', 'intel'));
