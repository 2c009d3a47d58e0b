DROP INDEX intel_sightings_unmailed;
ALTER TABLE intel_sightings DROP COLUMN mailed_at;
ALTER TABLE intel_feeds DROP COLUMN may_shrink;
ALTER TABLE routers DROP COLUMN owner_since;
ALTER TABLE intel_sightings DROP COLUMN closed_why;
ALTER TABLE intel_sightings DROP COLUMN closed_at;
