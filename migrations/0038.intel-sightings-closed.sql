-- Issue 80. A sighting of a value the delivery would never send (not public, allowlisted,
-- the service's own, held or suppressed: server/intel/sql.py `withheld`) is closed, with
-- why, and never told; closed by the intel jobs (the untold ones each minute), so that
-- sightings recorded before this upgrade are closed too (the service's own networks are
-- settings, not known to a migration).
ALTER TABLE intel_sightings ADD COLUMN closed_at timestamptz;
ALTER TABLE intel_sightings ADD COLUMN closed_why text;
-- When the router's previous owner stopped being its owner (NULL: it never had another): its
-- owner is told only of what the router saw from then on. Before this upgrade: the first
-- `owner set` in intel_log after the last one naming another user.
ALTER TABLE routers ADD COLUMN owner_since timestamptz;
UPDATE routers r SET owner_since = (
    SELECT min(l.at) FROM intel_log l
    WHERE l.action = 'owner set' AND l.detail->>'mac' = r.mac::text
      AND l.at > (SELECT max(o.at) FROM intel_log o
                  WHERE o.action = 'owner set' AND o.detail->>'mac' = r.mac::text
                    AND o.detail->>'user' IS NOT NULL
                    AND o.detail->>'user' IS DISTINCT FROM r.owner_user))
WHERE EXISTS (SELECT 1 FROM intel_log l WHERE l.action = 'owner set'
              AND l.detail->>'mac' = r.mac::text);
-- A fetched version that drops most of a feed's previous one is refused unless the feed may
-- shrink (`intel may-shrink NAME yes`).
ALTER TABLE intel_feeds ADD COLUMN may_shrink boolean NOT NULL DEFAULT false;
-- An owner's sightings of an hour whose email had gone are told in the feed at once and
-- listed in the owner's next email (`mailed_at` set when one lists them); those told before
-- this upgrade count as mailed.
ALTER TABLE intel_sightings ADD COLUMN mailed_at timestamptz;
UPDATE intel_sightings SET mailed_at = told_at WHERE told_at IS NOT NULL;
CREATE INDEX intel_sightings_unmailed ON intel_sightings (told_at)
    WHERE told_at IS NOT NULL AND mailed_at IS NULL;
