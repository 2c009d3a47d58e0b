-- Operators' rule overrides (issue 16): keep a rule off (disable) or always on (enable), for
-- the fleet (mac NULL) or one router; they apply to every ruleset until removed.
CREATE TABLE rule_overrides (
    id          bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action      text         NOT NULL CHECK (action IN ('disable', 'enable')),
    selector    text         NOT NULL,
    mac         macaddr      REFERENCES routers (mac) ON DELETE CASCADE,
    note        text,
    created_at  timestamptz  NOT NULL DEFAULT now()
);
