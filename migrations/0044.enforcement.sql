-- Issue 82. What each router's firewall enforced, as its agent reports it (POST
-- /rules/enforced, server/enforcement/): per router, day and list (its own block list, the
-- fleet's, the threat intelligence's) the packets and bytes its nftables sets dropped, and
-- the entries that matched, at most ENFORCEMENT_ENTRIES_PER_ROUTER_DAY of them a router-day
-- (the first reported, the most matched of each report first). Counted for the fleet by the
-- reporter networks of the routers that count (server/enforcement/sql.py). Kept 31 days
-- (the figures look back 30). Distributed by `mac` under Citus.
CREATE TABLE enforcement_days (
    mac      macaddr  NOT NULL,
    day      date     NOT NULL,
    list     text     NOT NULL CHECK (list IN ('firewall', 'fleet', 'intel')),
    network  cidr,             -- the reporter network of the day's last report (NULL: none)
    packets  bigint   NOT NULL,
    bytes    bigint   NOT NULL,
    alerts   bigint   NOT NULL DEFAULT 0,  -- the intel rules' alerts (list 'intel' only)
    reports  integer  NOT NULL DEFAULT 1,
    PRIMARY KEY (mac, day, list)
);
CREATE INDEX enforcement_days_by_day ON enforcement_days (day);
CREATE TABLE enforcement_hits (
    mac      macaddr  NOT NULL,
    day      date     NOT NULL,
    list     text     NOT NULL,
    entry    cidr     NOT NULL,
    packets  bigint   NOT NULL,
    bytes    bigint   NOT NULL,
    PRIMARY KEY (mac, day, list, entry)
);
CREATE INDEX enforcement_hits_by_day ON enforcement_hits (day, list, entry);
-- Which feeds' addresses and networks a matched block entry (an address, or overlapping
-- values merged into one network) holds: looked up by containment when the figures are read.
CREATE INDEX intel_indicators_inet ON intel_indicators USING gist ((value::inet) inet_ops)
    WHERE kind IN ('ip', 'network');
-- How widely each threat feed's address or network matched on the routers' firewalls in the
-- last 30 days (reporter networks, as the fleet counts them), set every hour by the
-- enforcement-figures job: a document trimmed to a router's capacity keeps these first
-- (server/intel/sql.py DELIVERED). Under Citus it stays on the coordinator.
CREATE TABLE intel_matched (
    kind      text     NOT NULL,
    value     text     NOT NULL COLLATE "C",
    networks  integer  NOT NULL,
    PRIMARY KEY (kind, value)
);
