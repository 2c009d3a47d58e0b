ALTER TABLE generation_queue
    DROP COLUMN declared_rules,
    DROP COLUMN declared_sets,
    DROP COLUMN declared_ja4;
