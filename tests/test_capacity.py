"""Quick versions of the capacity benchmarks (bench/partitions.py, bench/storage.py):
retention by partition drop against the batched delete of the same rows, and the disk each
router and each record takes. The storage one runs on the real corpus
(tests/corpus) for its rules and records."""

from __future__ import annotations

import pytest


from bench.partitions import PLAIN_TABLES, retention_figures
from bench.storage import BUDGET_BYTES, measure
from server.db.connect import connect
from testkit.database import partitions_for_history

DAYS = 10


@pytest.mark.drill  # the server's WAL position counts every session's writes: one at a time
def test_retention_by_partition_drop_writes_far_less_wal(database):
    partitions_for_history(database, DAYS)
    conn = connect(database)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(PLAIN_TABLES)
            figures = retention_figures(database, cur, 300_000, DAYS)
            cur.execute("SELECT count(*) FROM activations")
            left_partitioned = cur.fetchone()[0]
            cur.execute("SELECT count(*) FROM plain_activations")
            left_plain = cur.fetchone()[0]
    finally:
        conn.close()
    assert figures.rows_removed == 300_000 - left_plain > 120_000
    assert left_partitioned == left_plain
    assert figures.partitions_dropped == DAYS // 2
    assert figures.delete_wal > 10 * figures.drop_wal


@pytest.mark.drill  # a storage benchmark
def test_storage_per_router_within_budget():
    footprints, per_record, activation = measure(routers=20, records=2_000)
    before, after = footprints.values()
    assert after.per_router <= BUDGET_BYTES < before.per_router
    assert after.tables["router_rules"] > 0 and after.files > 0
    # Compressed chunks and their summaries take a fraction of a row per record.
    assert 200 < per_record.row_table < 5_000
    for body in (200, 2):
        packed = sum(per_record.packed[body].values()) / per_record.records
        assert 10 < packed < per_record.row_table / 3
        assert per_record.in_rounds[body]["telemetry_chunks"] > 0
    one, rolled = activation
    assert 20 < one < 500 and 20 < rolled < 500
