ALTER TABLE hunt_budgets DROP COLUMN networks;
ALTER TABLE hunt_pending DROP COLUMN network, DROP COLUMN records;
