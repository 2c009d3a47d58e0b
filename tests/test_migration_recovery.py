"""Migrations survive an interrupted migrator: each commits with its record; one that an
earlier release left applied but not recorded is recognised and recorded; a lock row left by
a killed yoyo is cleared; a migration that fails for a real reason still fails."""

from __future__ import annotations

import contextlib
import uuid

import psycopg
import pytest
from yoyo import get_backend

from migrations import read_schema_migrations
from server.db.connect import execute_alone
from server.db.migrate import (SCHEMA_FINGERPRINT_SQL, apply_migrations, ensure_database,
                               roll_back_migrations)
from testkit.database import Sql


def fingerprint(location) -> str:
    return Sql(location).value(SCHEMA_FINGERPRINT_SQL)


def recorded(location) -> list[str]:
    return [row[0] for row in Sql(location).rows(
        "SELECT migration_id FROM _yoyo_migration ORDER BY migration_id")]


@contextlib.contextmanager
def blank_database(server):
    location = server.with_name(f"rb_blank_{uuid.uuid4().hex[:12]}")
    ensure_database(location)
    try:
        yield location
    finally:
        execute_alone(server, f"DROP DATABASE {location.name} WITH (FORCE)")


@contextlib.contextmanager
def cloned_database(server, template):
    """A copy of `template` (no session may be connected to it), dropped afterwards."""
    location = server.with_name(f"rb_clone_{uuid.uuid4().hex[:12]}")
    execute_alone(server, f"CREATE DATABASE {location.name} TEMPLATE {template.name}")
    try:
        yield location
    finally:
        execute_alone(server, f"DROP DATABASE {location.name} WITH (FORCE)")


def apply_with_yoyo(location, last: str, unmark: bool = False) -> None:
    """The migrations up to `last` not applied yet, applied as yoyo does; with `unmark`, the
    last one's record then removed (what a kill between apply_one's two commits leaves)."""
    migrations = read_schema_migrations()
    backend = get_backend(location.yoyo_url())
    try:
        backend.apply_migrations(backend.to_apply(migrations.filter(lambda m: m.id <= last)))
        if unmark:
            backend.unmark_migrations(migrations.filter(lambda m: m.id == last))
    finally:
        backend.connection.close()


def applied_but_not_recorded(pg_server, migrated_fingerprint: str, chosen) -> list[str]:
    """That state for each migration `chosen(index, count)` picks: the next start records it,
    applies the rest, and the schema is the one a clean migration makes. Each state is a copy
    of one database migrated a step further each turn, its last record then removed (a
    database migrated from blank each turn took 45 times the migrations for the same
    states). The ids tried."""
    migrations = read_schema_migrations()
    tried = []
    with blank_database(pg_server) as through:
        for index, migration in enumerate(migrations):
            apply_with_yoyo(through, migration.id)
            if not chosen(index, len(migrations)):
                continue
            with cloned_database(pg_server, through) as database:
                apply_with_yoyo(database, migration.id, unmark=True)
                assert migration.id not in recorded(database)
                applied = apply_migrations(database)
                assert applied == [m.id for m in migrations if m.id >= migration.id]
                assert recorded(database) == [m.id for m in migrations]
                assert fingerprint(database) == migrated_fingerprint, migration.id
            tried.append(migration.id)
    return tried


def test_a_migration_applied_but_not_recorded_is_recorded(pg_server, single_server_database):
    """Four of the migrations (the first, the last and two between): the default tier's
    sample; the drill tier tries every one (the next test)."""
    tried = applied_but_not_recorded(
        pg_server, fingerprint(single_server_database),
        lambda index, count: index in (0, count // 3, 2 * count // 3, count - 1))
    assert len(tried) == 4


@pytest.mark.drill
def test_each_migration_applied_but_not_recorded_is_recorded(pg_server, single_server_database):
    """Every migration in turn (28-49 s on a 2-core machine: the drill tier's)."""
    tried = applied_but_not_recorded(pg_server, fingerprint(single_server_database),
                                     lambda index, count: True)
    assert tried == [m.id for m in read_schema_migrations()]


def test_a_migration_that_truly_fails_is_not_recorded(pg_server):
    """A table in the way of 0010's (not made by it): the migration fails with PostgreSQL's
    error, nothing of it stays, and it is not taken for applied."""
    with blank_database(pg_server) as database:
        apply_with_yoyo(database, "0009.notification-keys-and-deliveries")
        Sql(database).rows("CREATE TABLE router_keys (something text)")
        with pytest.raises(psycopg.errors.DuplicateTable):
            apply_migrations(database)
        assert recorded(database)[-1] < "0010"
        Sql(database).rows("DROP TABLE router_keys")
        assert apply_migrations(database)[0].startswith("0010")


def test_a_lock_left_by_a_killed_migrator_is_cleared(single_server_database):
    """yoyo's lock row of a process that no longer exists: the next migrator clears it instead
    of waiting for it and failing with LockTimeout on every start."""
    sql = Sql(single_server_database)
    sql.rows("INSERT INTO yoyo_lock (locked, ctime, pid) VALUES (1, now(), 999999)")
    assert apply_migrations(single_server_database) == []
    assert sql.value("SELECT count(*) FROM yoyo_lock") == 0


def test_rolled_back_to_a_schema_and_forward_again(single_server_database):
    """`router-backend migrate --down-to N`: the rollback the release before an upgrade
    needs, each migration's rollback committed with its record's removal."""
    migrated = fingerprint(single_server_database)
    newer = [m.id for m in read_schema_migrations() if m.id.split(".")[0] > "0020"]
    assert roll_back_migrations(single_server_database, "0020") == sorted(newer, reverse=True)
    assert recorded(single_server_database)[-1].startswith("0020")
    assert roll_back_migrations(single_server_database, "0020") == []
    assert apply_migrations(single_server_database) == newer
    assert fingerprint(single_server_database) == migrated
