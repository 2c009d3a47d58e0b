DROP TABLE hunt_log;
DROP TABLE hunt_postings;
