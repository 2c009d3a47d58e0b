DROP TABLE upload_keys;
