DROP TABLE fleet_matched;
