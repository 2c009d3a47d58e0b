DROP TABLE hunt_pending;
