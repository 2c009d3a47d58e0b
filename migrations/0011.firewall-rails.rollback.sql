DROP TABLE firewall_allowlist;
ALTER TABLE activations DROP COLUMN address;
