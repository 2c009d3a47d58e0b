-- Issue 34. Payload changes are notified by the statements that write payloads
-- (server/db/rules.py), in their own transaction, instead of by a trigger on router_rules:
-- under Citus the table is distributed, a trigger would run on the worker holding the
-- router's shard, and its NOTIFY would reach only listeners connected to that worker,
-- while every server process LISTENs on the coordinator.
DROP TRIGGER router_rules_changed ON router_rules;
DROP TRIGGER router_rules_inserted ON router_rules;
DROP FUNCTION notify_router_rules();
