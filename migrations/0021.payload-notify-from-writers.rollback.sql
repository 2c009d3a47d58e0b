-- Back to the trigger of migration 0006.
CREATE FUNCTION notify_router_rules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('router_rules', NEW.mac::text);
    RETURN NULL;
END $$;

CREATE TRIGGER router_rules_inserted
    AFTER INSERT ON router_rules
    FOR EACH ROW EXECUTE FUNCTION notify_router_rules();

CREATE TRIGGER router_rules_changed
    AFTER UPDATE ON router_rules
    FOR EACH ROW
    WHEN (OLD.ids_etag IS DISTINCT FROM NEW.ids_etag
          OR OLD.firewall_etag IS DISTINCT FROM NEW.firewall_etag)
    EXECUTE FUNCTION notify_router_rules();
