"""The Core tables in server/db/schema.py match what the migrations build, and every
migration applies, rolls back and applies again (the "stairway")."""

from __future__ import annotations

import sqlalchemy as sa
from yoyo import get_backend

from migrations import read_schema_migrations
from server.db.pool import DIALECT
from server.db.schema import metadata


def engine_for(location):
    return sa.create_engine("postgresql+psycopg2://", connect_args=location.connect_kwargs(),
                            poolclass=sa.pool.NullPool)


def describe_database(location) -> dict:
    engine = engine_for(location)
    try:
        inspector = sa.inspect(engine)
        with engine.connect() as conn:  # the time partitions are the parents' business
            partitions = set(conn.scalars(sa.text(
                "SELECT relname FROM pg_class WHERE relispartition")))
        tables = {}
        for name in inspector.get_table_names():
            if name.startswith("_yoyo") or name.startswith("yoyo") or name in partitions:
                continue
            columns = {c["name"]: (c["type"].compile(dialect=DIALECT), c["nullable"])
                       for c in inspector.get_columns(name)}
            primary_key = tuple(inspector.get_pk_constraint(name)["constrained_columns"])
            tables[name] = (columns, primary_key)
        return tables
    finally:
        engine.dispose()


def describe_metadata() -> dict:
    tables = {}
    for table in metadata.sorted_tables:
        columns = {c.name: (c.type.compile(dialect=DIALECT), c.nullable) for c in table.columns}
        tables[table.name] = (columns, tuple(c.name for c in table.primary_key.columns))
    return tables


def test_core_tables_match_migrated_schema(database):
    assert describe_database(database) == describe_metadata()


def test_migrations_stairway(single_server_database):
    database = single_server_database
    backend = get_backend(database.yoyo_url())
    try:
        migrations = read_schema_migrations()
        assert [m.id for m in migrations][0] == "0001.initial-schema"
        backend.rollback_migrations(backend.to_rollback(migrations))
        assert describe_database(database) == {}
        for migration in migrations:
            backend.apply_migrations(backend.to_apply(migrations.filter(lambda m: m is migration)))
            backend.rollback_migrations(backend.to_rollback(
                migrations.filter(lambda m: m is migration)))
            backend.apply_migrations(backend.to_apply(migrations.filter(lambda m: m is migration)))
        assert describe_database(database) == describe_metadata()
    finally:
        backend.connection.close()
