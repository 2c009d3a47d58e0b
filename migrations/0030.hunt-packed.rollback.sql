DROP TABLE hunt_budgets;
DROP TABLE hunt_packed;
DROP TABLE hunt_packed_days;
DROP TABLE hunt_removed_routers;
DROP TABLE hunt_routers;
DROP TABLE hunt_hash_seed;
