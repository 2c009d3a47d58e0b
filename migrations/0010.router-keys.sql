-- Per-router keys (ROUTER_AUTH=key, issue 12): only a SHA-256 of each key is stored (a key
-- is 256 random bits, so a fast hash is enough). Removing a router removes its key.
CREATE TABLE router_keys (
    mac        macaddr      PRIMARY KEY REFERENCES routers (mac) ON DELETE CASCADE,
    key_hash   bytea        NOT NULL,
    issued_at  timestamptz  NOT NULL DEFAULT now(),
    issued_by  text         NOT NULL CHECK (issued_by IN ('operator', 'enrollment'))
);
