-- Issue 27. Finding 7: after `subscriptions reset` whoever held the fleet token could enroll
-- the router first. A reset now opens that router's enrollment until open_until; a router
-- reset whose window passed gets 409 until an operator resets it again. A router never reset
-- (no row) enrolls as before, once.
CREATE TABLE enrollment_windows (
    mac         macaddr      PRIMARY KEY REFERENCES routers (mac) ON DELETE CASCADE,
    open_until  timestamptz  NOT NULL
);

-- Finding 1: the per-address registration limit was per process and raced (checked before
-- the insert, counted after). A router registered by its first call (or enrollment) records
-- the client address bucket it came from; registrations count the bucket's last minute in
-- the database, serialised per bucket by an advisory lock (server/db/routers.py).
ALTER TABLE routers ADD COLUMN registered_from text;
CREATE INDEX routers_registered_from_idx ON routers (registered_from, registered_at)
    WHERE registered_from IS NOT NULL;
