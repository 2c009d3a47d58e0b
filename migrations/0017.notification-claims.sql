-- The retry loop's claims on notifications name their owner (the process), so a claim
-- whose statement reached the database after the loop had given up on it (a connection
-- lost, a network that delivered it late) is released by that loop's next round instead of
-- holding the notification for the whole lease (5 minutes). An outcome recorded clears it.
ALTER TABLE notifications ADD COLUMN claimed_by text;
CREATE INDEX notifications_claimed_by_idx ON notifications (claimed_by)
    WHERE claimed_by IS NOT NULL;
