-- Issue 82. How widely each address of the fleet's list matched on the routers' firewalls in
-- the last 30 days (reporter networks, as the fleet counts them, when at least
-- FLEET_MIN_NETWORKS), set every hour by the enforcement-figures job: a list trimmed to a
-- router's capacity keeps these first (server/fleet/sql.py). Under Citus it stays on the
-- coordinator, as intel_matched does.
CREATE TABLE fleet_matched (
    address   inet     PRIMARY KEY,
    networks  integer  NOT NULL
);
