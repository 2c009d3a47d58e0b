DROP TABLE fleet_outbreaks;
DROP TABLE fleet_attackers;
DROP INDEX routers_poll_address_idx;
ALTER TABLE routers DROP COLUMN poll_address;
