-- Issue 82. The IDS rules' alerts by their source (the payload's `reason`: override, fired,
-- fleet, sampled, flowbits) in a router's enforcement report: each a list of its own
-- (`ids.fired`, ...) with its alerts and no packets (server/enforcement/report.py).
ALTER TABLE enforcement_days DROP CONSTRAINT enforcement_days_list_check;
ALTER TABLE enforcement_days ADD CONSTRAINT enforcement_days_list_check CHECK (
    list IN ('firewall', 'fleet', 'intel', 'ids.override', 'ids.fired', 'ids.fleet',
             'ids.sampled', 'ids.flowbits'));
