DROP TRIGGER router_rules_changed ON router_rules;
DROP TRIGGER router_rules_inserted ON router_rules;
DROP FUNCTION notify_router_rules();
