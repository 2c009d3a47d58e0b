DROP TABLE service_settings;
