-- Issue 80. Routers that do not count for the fleet yet (fresh MACs, FLEET_MIN_ROUTER_AGE_HOURS)
-- share one day's budget of hunt postings (HUNT_POSTINGS_PER_ROUTER_DAY) per network their
-- uploads came from (server/hunt/indexer.py): the postings they added, by network and day.
-- One row per (network, day) that such a router uploaded from; kept as hunt_budgets are.
-- Under Citus it stays on the coordinator (keyed by network, not by router).
CREATE TABLE hunt_network_budgets (
    network   cidr         NOT NULL,
    day       timestamptz  NOT NULL,
    postings  integer      NOT NULL DEFAULT 0,
    PRIMARY KEY (network, day)
);
