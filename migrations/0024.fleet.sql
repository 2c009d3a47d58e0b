-- Issue 46. What the fleet sees together (server/jobs/fleet.py): the external addresses that
-- alerted at enough distinct routers' networks (the fleet's attackers, served to every router
-- as one shared document, GET /rules/fleet) and the signatures that fired at as many
-- (outbreaks, kept in every router's IDS payload). Each run of the `fleet` job replaces both
-- tables in one transaction; they are tables of the coordinator under Citus.

-- Where each router last polled from (GET /rules/last_updated), written only when it changes:
-- the fleet job counts reporters by their network, and never lists an address a router of
-- the fleet polls from.
ALTER TABLE routers ADD COLUMN poll_address inet;
CREATE INDEX routers_poll_address_idx ON routers (poll_address);

CREATE TABLE fleet_attackers (
    address     inet         PRIMARY KEY,
    routers     integer      NOT NULL,  -- reporting routers that counted
    networks    integer      NOT NULL,  -- their distinct networks (/24, /48): the threshold's
    alerts      bigint       NOT NULL,
    severity    smallint     NOT NULL,  -- the most severe alert's
    signatures  bigint[]     NOT NULL,  -- most alerted first
    first_seen  timestamptz  NOT NULL,  -- the hour of the first report in the window
    last_seen   timestamptz  NOT NULL,
    expires_at  timestamptz  NOT NULL,  -- last report plus the window
    reporters   jsonb        NOT NULL   -- [[mac, network, alerts], ...]: operators only
);

CREATE TABLE fleet_outbreaks (
    sid         bigint       PRIMARY KEY,
    severity    smallint     NOT NULL,
    routers     integer      NOT NULL,
    networks    integer      NOT NULL,
    alerts      bigint       NOT NULL,
    first_seen  timestamptz  NOT NULL,
    last_seen   timestamptz  NOT NULL,
    reporters   jsonb        NOT NULL
);
