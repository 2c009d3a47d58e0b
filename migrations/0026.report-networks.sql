-- Issue 50. Each alert counts for the fleet from the network its upload came from (the
-- client's address through TRUSTED_PROXIES, as a /24 or /48: engine/addresses.py), written
-- with the summary row at ingestion; the last upload's network when several added to a row.
-- Rows summarised before this migration have none and count for no network: the fleet's
-- window (FLEET_WINDOW_HOURS) renews them within a day.
ALTER TABLE telemetry_alerts ADD COLUMN network cidr;

-- Poll addresses in their canonical form (an IPv4 address written as IPv6 is that IPv4
-- address), as the service now records them, so a comparison with an alert's address holds.
UPDATE routers SET poll_address = '0.0.0.0'::inet + (poll_address - '::ffff:0.0.0.0'::inet)
WHERE family(poll_address) = 6 AND poll_address <<= '::ffff:0:0/96';
UPDATE routers SET poll_address = '0.0.0.0'::inet + (poll_address - '64:ff9b::'::inet)
WHERE family(poll_address) = 6 AND poll_address <<= '64:ff9b::/96';
UPDATE routers SET poll_address = '0.0.0.0'::inet + (poll_address - '::'::inet)
WHERE family(poll_address) = 6 AND poll_address <<= '::/96' AND poll_address > '::1';

-- What routers' poll addresses kept off the fleet's list, remembered for the window: a
-- router moving between two addresses cannot make the list change at every run. A table of
-- the coordinator under Citus, like the lists.
CREATE TABLE fleet_polled_kept (
    key         inet         PRIMARY KEY,  -- an IPv4 address, or an IPv6 /64
    kept_until  timestamptz  NOT NULL
);
