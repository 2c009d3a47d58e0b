DROP TABLE router_keys;
