DROP TABLE intel_log;
ALTER TABLE routers DROP COLUMN owner_email;
ALTER TABLE routers DROP COLUMN owner_user;
DROP TABLE intel_sightings;
DROP TABLE intel_decisions;
DROP TABLE intel_indicators;
DROP TABLE intel_feeds;
