-- Issue 52, after a hostile review. A domain now posts itself and its parents, up to 8
-- labels from the root (server/telemetry/indicators.py PARENT_LABELS), so that a search for
-- a name and every name under it is one exact key: one posting per router and day, however
-- many names under it one router looked up (a range of names let one router's thousands
-- hide the other routers from a hunt's bounded read). The days indexed before this release
-- get their parents here; a record that carried a name and one under it is counted once for
-- each in a parent's `records` on those days.
INSERT INTO hunt_postings AS h (day, kind, value, mac, first_seen, last_seen, records)
SELECT p.day, 'd', parent.value, p.mac, min(p.first_seen), max(p.last_seen),
       sum(p.records)::integer
FROM hunt_postings p,
     LATERAL (SELECT array_to_string((string_to_array(p.value, '.'))[1:n], '.') AS value
              FROM generate_series(1, least(array_length(string_to_array(p.value, '.'), 1) - 1,
                                            8)) AS n) AS parent
WHERE p.kind = 'd'
GROUP BY p.day, parent.value, p.mac
ON CONFLICT (kind, value, day, mac) DO UPDATE SET
    first_seen = least(h.first_seen, excluded.first_seen),
    last_seen = greatest(h.last_seen, excluded.last_seen),
    records = h.records + excluded.records;

-- A drill-down (the records of one router carrying an indicator) is recorded as a hunt is,
-- naming the router; a count that stopped at the hunt's bound is recorded as a lower bound.
ALTER TABLE hunt_log ADD COLUMN router macaddr;
ALTER TABLE hunt_log ADD COLUMN matches_exact boolean NOT NULL DEFAULT true;

-- The log's pages, newest first, read by this index rather than a sort of the whole log.
CREATE INDEX hunt_log_newest ON hunt_log (asked_at DESC, id DESC);
