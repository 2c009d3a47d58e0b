-- Issue 83. "Not an attack": an owner's mark, through the frontend's API
-- (docs/notification-api.md), on an address their router alerted on or blocked, a
-- signature, or a threat sighting. It takes effect for that router at once (an allowlist
-- entry or a rule override of its own, `effect`; a sighting closed) and is counted for the
-- fleet by the reporter networks of the routers marking the value (server/feedback/). A
-- mark undone keeps its row (`unmarked_at`): who marked what and when is never lost. Under
-- Citus it stays on the coordinator.
CREATE TABLE false_positives (
    id           bigserial    PRIMARY KEY,
    mac          macaddr      NOT NULL,
    user_id      text         NOT NULL,
    kind         text         NOT NULL CHECK (kind IN ('address', 'signature', 'sighting')),
    value        text         NOT NULL COLLATE "C",  -- an address, a sid, or KIND:VALUE stored
    feed         text,                               -- a sighting's feed
    network      cidr,        -- the router's reporter network when marked (NULL: none known)
    note         text,
    effect       bigint,      -- the allowlist entry or override made for it (NULL: none new)
    marked_at    timestamptz  NOT NULL DEFAULT now(),
    unmarked_at  timestamptz,
    unmarked_by  text
);
CREATE UNIQUE INDEX false_positives_live ON false_positives (mac, kind, value)
    WHERE unmarked_at IS NULL;
CREATE INDEX false_positives_by_value ON false_positives (kind, value)
    WHERE unmarked_at IS NULL;
CREATE INDEX false_positives_by_router ON false_positives (mac, marked_at);
