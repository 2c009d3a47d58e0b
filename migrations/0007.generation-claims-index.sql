-- Each server process renews all its generation claims every 20 s
-- (UPDATE ... WHERE claimed_by = me); only claimed rows are indexed.
CREATE INDEX generation_queue_claimed_idx ON generation_queue (claimed_by)
    WHERE claimed_by IS NOT NULL;
