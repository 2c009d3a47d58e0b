DROP TABLE router_rules;
DROP TABLE activations;
DROP TABLE cfm_records;
DROP TABLE ids_events;
DROP TABLE routers;
