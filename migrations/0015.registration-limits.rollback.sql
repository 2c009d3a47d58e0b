DROP INDEX routers_registered_from_idx;
ALTER TABLE routers DROP COLUMN registered_from;
DROP TABLE enrollment_windows;
