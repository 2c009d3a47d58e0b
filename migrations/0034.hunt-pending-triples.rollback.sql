ALTER TABLE hunt_pending DROP COLUMN triples;
