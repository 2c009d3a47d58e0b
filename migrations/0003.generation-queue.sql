-- The persistent generation queue: one row per registered router, ordered by due time
-- (routers never generated first). A claim is a lease (claimed_by, claimed_until) taken with
-- FOR UPDATE SKIP LOCKED, so several server processes never generate one router at once and
-- a crashed process's claims expire by themselves.

CREATE TABLE generation_queue (
    mac               macaddr      PRIMARY KEY,
    next_due_at       timestamptz  NOT NULL DEFAULT now(),
    generated_at      timestamptz,
    generation_count  integer      NOT NULL DEFAULT 0,
    attempts          integer      NOT NULL DEFAULT 0,
    last_error        text,
    last_seconds      real,
    claimed_by        text,
    claimed_until     timestamptz
);
CREATE INDEX generation_queue_due_idx ON generation_queue ((generated_at IS NOT NULL), next_due_at);

INSERT INTO generation_queue (mac) SELECT mac FROM routers ON CONFLICT DO NOTHING;
