-- Firewall safety rails (issue 12).
-- Where a router calls from, with each activation: its own public address is never blocked
-- for it (adding a nullable column without a default rewrites nothing).
ALTER TABLE activations ADD COLUMN address inet;

-- Networks never blocked: for the whole fleet (mac NULL) or for one router.
CREATE TABLE firewall_allowlist (
    id          bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    network     cidr         NOT NULL,
    mac         macaddr      REFERENCES routers (mac) ON DELETE CASCADE,
    note        text,
    created_at  timestamptz  NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX firewall_allowlist_entry_idx
    ON firewall_allowlist (network, coalesce(mac, '00:00:00:00:00:00'::macaddr));
