ALTER TABLE notifications DROP COLUMN claimed_by;
