DROP INDEX notifications_user_feed_idx;
CREATE INDEX notifications_user_feed_idx ON notifications (user_id, created_at DESC, id DESC);
DROP TABLE notification_deliveries;
DROP TABLE notification_keys;
