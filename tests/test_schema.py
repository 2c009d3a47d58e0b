"""Every migration applies, rolls back and applies again (the "stairway"), and the schema it
leaves is the one the migrations build in one go."""

from __future__ import annotations

from yoyo import get_backend

from migrations import read_schema_migrations
from server.db.connect import connect

# Columns (type, nullable) and primary keys of the tables; time partitions are their
# parents' business.
COLUMNS = """
SELECT c.table_name, c.column_name, c.data_type, c.is_nullable
FROM information_schema.columns c JOIN pg_class r ON r.relname = c.table_name
WHERE c.table_schema = 'public' AND NOT r.relispartition AND r.relkind IN ('r', 'p')
  AND c.table_name NOT LIKE '%yoyo%'
ORDER BY 1, 2"""
PRIMARY_KEYS = """
SELECT t.relname, array_agg(a.attname ORDER BY a.attnum)
FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(i.indkey)
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE i.indisprimary AND n.nspname = 'public' AND NOT t.relispartition
  AND t.relname NOT LIKE '%yoyo%'
GROUP BY 1 ORDER BY 1"""


def describe_database(location) -> dict:
    conn = connect(location)
    try:
        with conn.cursor() as cur:
            cur.execute(COLUMNS)
            columns = cur.fetchall()
            cur.execute(PRIMARY_KEYS)
            return {"columns": columns, "primary keys": cur.fetchall()}
    finally:
        conn.close()


def test_migrations_stairway(single_server_database):
    database = single_server_database
    migrated = describe_database(database)
    assert {"generation_queue", "job_ticks", "notifications"} <= {
        table for table, *_ in migrated["columns"]}
    backend = get_backend(database.yoyo_url())
    try:
        migrations = read_schema_migrations()
        assert [m.id for m in migrations][0] == "0001.initial-schema"
        backend.rollback_migrations(backend.to_rollback(migrations))
        assert describe_database(database) == {"columns": [], "primary keys": []}
        for migration in migrations:
            backend.apply_migrations(backend.to_apply(migrations.filter(lambda m: m is migration)))
            backend.rollback_migrations(backend.to_rollback(
                migrations.filter(lambda m: m is migration)))
            backend.apply_migrations(backend.to_apply(migrations.filter(lambda m: m is migration)))
        assert describe_database(database) == migrated
    finally:
        backend.connection.close()
