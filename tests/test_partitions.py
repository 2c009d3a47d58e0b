"""Time partitions (migration 0014, server/db/partitions.py): converting a filled database
keeps every row, partitions exist ahead of time (telemetry's of migration 0018 too), and the
planning of ranges is right."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from server.db.partitions import (TIME_COLUMNS, Partition, create_statements,
                                  ensure_partitions, grid_floor, horizon, missing_ranges)
from testkit.database import Sql, migrate, migrated_database

COLUMNS = {
    "ids_events": "mac, id, received_at, event_time, event_type, src_ip, src_port, dest_ip, "
                  "dest_port, proto, app_proto, signature_id, severity, record",
    "cfm_records": "mac, id, received_at, event_time, event_type, src_ip, src_port, dest_ip, "
                   "dest_port, proto, app_proto, record",
    "activations": "mac, id, activated_at, address",
}
PARTITION = "0014.time-partitions"


def checksums(sql: Sql) -> dict:
    return {table: sql.rows(f"SELECT count(*), md5(string_agg(t::text, '|' ORDER BY mac, id)) "
                            f"FROM (SELECT {columns} FROM {table}) t")[0]
            for table, columns in COLUMNS.items()}


def fill_under_the_old_schema(sql: Sql) -> None:
    """Rows over ten days, several routers, every column set."""
    for table, extra in (("ids_events", ", signature_id, severity"), ("cfm_records", "")):
        values = ", 2000000 + n % 7, 1 + n % 3" if extra else ""
        sql.rows(f"""
            INSERT INTO {table} (mac, received_at, event_time, event_type, src_ip, src_port,
                                 dest_ip, dest_port, proto, app_proto{extra}, record)
            SELECT ('02:00:00:00:00:' || lpad(to_hex(n % 16), 2, '0'))::macaddr,
                   now() - n * interval '9 minutes', now() - n * interval '9 minutes',
                   'alert', ('10.0.' || n % 250 || '.1')::inet, n % 65536,
                   '203.0.113.9', 443, 'TCP', 'tls'{values},
                   jsonb_build_object('n', n, 'text', repeat('x', n % 50))
            FROM generate_series(1, 1600) n""")
    sql.rows("INSERT INTO activations (mac, activated_at, address) "
             "SELECT ('02:00:00:00:00:' || lpad(to_hex(n % 16), 2, '0'))::macaddr, "
             "now() - n * interval '1 hour', ('198.51.100.' || n % 200)::inet "
             "FROM generate_series(1, 500) n")


def test_converting_a_filled_database_keeps_every_row_and_rolls_back(pg_server):
    with migrated_database(pg_server, "rb_convert", distributed=False) as location:
        sql = Sql(location)
        migrate(location, PARTITION, "rollback")
        assert sql.value("SELECT relkind FROM pg_class WHERE relname = 'ids_events'") == "r"
        fill_under_the_old_schema(sql)
        before = checksums(sql)
        assert before["ids_events"][0] == 1600 and before["activations"][0] == 500

        migrate(location, PARTITION)
        assert checksums(sql) == before
        for table in COLUMNS:
            assert sql.value("SELECT relkind FROM pg_class WHERE relname = %s", (table,)) == "p"
            assert sql.value(f"SELECT count(*) FROM {table}_legacy") == before[table][0]
        # New rows go on with the old identity and land in the partitions created ahead
        # (as the service of 0014 to 0017 created them).
        ahead = grid_floor(datetime.now(timezone.utc) + timedelta(days=2), 1)
        for statement in create_statements("ids_events", ahead, ahead + timedelta(days=1)):
            sql.rows(statement)
        sql.rows("INSERT INTO ids_events (mac, received_at, record) "
                 "VALUES ('02:00:00:00:00:01', now() + interval '2 days', '{}')")
        assert sql.rows("SELECT id, tableoid::regclass::text FROM ids_events "
                        "WHERE received_at > now()") == [
            (1601, f"ids_events_p{datetime.now(timezone.utc) + timedelta(days=2):%Y%m%d}")]
        after = checksums(sql)

        migrate(location, PARTITION, "rollback")
        assert checksums(sql) == after
        assert sql.value("SELECT relkind FROM pg_class WHERE relname = 'ids_events'") == "r"
        sql.rows("INSERT INTO ids_events (mac, received_at, record) "
                 "VALUES ('02:00:00:00:00:01', now(), '{}')")
        assert sql.value("SELECT max(id) FROM ids_events") == 1602


def test_partitions_exist_ahead_and_creation_is_idempotent(database, sql):
    now = datetime.now(timezone.utc)
    # The test database was prepared like the service's (server.db.migrate.prepare_schema).
    assert ensure_partitions(database, 1, now) == []
    assert sql.value("SELECT count(*) FROM pg_inherits "
                     "WHERE inhparent = 'telemetry_chunks'::regclass") >= 8
    later = now + timedelta(days=3)
    created = ensure_partitions(database, 1, later)
    assert created == [f"{table}_p{horizon(later, 1) - timedelta(days=offset):%Y%m%d}"
                       for table in TIME_COLUMNS for offset in (2, 1, 0)]
    assert ensure_partitions(database, 1, later) == []
    # Chunk bodies are compressed already: every partition keeps them out of line as they are.
    assert {storage for (storage,) in sql.rows(
        "SELECT a.attstorage FROM pg_inherits i JOIN pg_attribute a ON a.attrelid = i.inhrelid "
        "WHERE i.inhparent = 'telemetry_chunks'::regclass AND a.attname = 'body'")} == {"e"}
    sql.rows("INSERT INTO activations (mac, activated_at) "
             "VALUES ('02:00:00:00:00:01', now() + interval '9 days')")


def test_a_longer_partition_length_applies_from_the_next_partition_on(database, sql):
    far = datetime.now(timezone.utc) + timedelta(days=40)
    created = ensure_partitions(database, 7, far)
    starts = [name.rsplit("_p", 1)[1] for name in created if name.startswith("telemetry_chunks")]
    cells = [grid_floor(far, 7) + timedelta(days=7 * k) for k in range(3)]
    assert starts == [f"{cell:%Y%m%d}" for cell in cells if cell < horizon(far, 7)]


def day(n: int) -> datetime:
    return datetime(2026, 11, 1, tzinfo=timezone.utc) + timedelta(days=n)


def test_missing_ranges_fill_only_the_gaps():
    legacy = Partition("t_legacy", None, day(2))
    existing = [legacy, Partition("t_p", day(3), day(4))]
    assert missing_ranges(existing, day(1) + timedelta(hours=5), day(6), 1) == [
        (day(2), day(3)), (day(4), day(5)), (day(5), day(6))]
    # A week-long grid cell cut by what exists already.
    week = grid_floor(day(2), 7)
    assert missing_ranges([Partition("t_legacy", None, day(2))], day(2), day(3), 7) == [
        (day(2), week + timedelta(days=7))]
    assert missing_ranges([], day(0), day(0) + timedelta(hours=1), 1) == [(day(0), day(1))]
