"""Telemetry at rest (issue 32, server/telemetry/): chunks keep every record as sent with its
own receive time; the compaction job merges small chunks whole or not at all, never holding
up uploads; export and the SQL tables give every record back once, oldest first."""

from __future__ import annotations

import asyncio
import subprocess
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from server.db.connect import connect
from server.db.lifecycle import open_database
from server.db.rows import RowsInsert
from server.db.partitions import LIST_PARTITIONS, partitions_from_rows
from server.telemetry.chunks import (COMPACT_LEVEL, INGEST_LEVEL, Chunk, compress, decompress,
                                     merged, one_line, split)
from server.hunt.budget import HuntBudget
from server.hunt.indexer import index_pending
from server.hunt.sql import UNREAD_UPLOAD
from server.telemetry import compaction
from server.telemetry.compaction import compact
from server.telemetry.export import stored_records
from testkit.database import command_env
from testkit.telemetry import stored_count, telemetry
from tests.commands import router_backend

MAC = "aa:bb:cc:00:32:01"
OTHER = "aa:bb:cc:00:32:02"
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
async def client(make_client, settings):
    """The app without the hunt indexer's turns or the live intel match (which indexes
    first): the tests here compact by hand and change the chunks' table with blocking
    statements, which would wait on an indexer's transaction that waits on the event
    loop they hold."""
    return await make_client(settings.replace(hunt_index_seconds=3600,
                                              intel_match_cron_schedule="0 0 1 1 *"))


def record(n: int, kind: str = "alert") -> bytes:
    return orjson.dumps({"event_type": kind, "n": n, "flow_id": n,
                         "src_ip": "203.0.113.5", "dest_ip": "192.168.1.2",
                         "alert": {"signature_id": 2000000 + n % 3, "severity": 1 + n % 3}})


async def upload(client, lines: list[bytes], mac: str = MAC, path: str = "/log/events"):
    response = await client.post(path, data=b"\n".join(lines) + b"\n",
                                 headers={**NDJSON, "X-ID": mac})
    assert response.status == 200, await response.text()
    return await response.json()


def chunk_rows(sql, mac: str = MAC) -> list[tuple]:
    return sql.rows("SELECT records, cardinality(upload_times) FROM telemetry_chunks "
                    "WHERE mac = %s ORDER BY received_at, id", (mac,))


def test_split_and_merge_keep_records_and_their_times():
    t0 = datetime(2026, 11, 24, tzinfo=timezone.utc)
    times = [t0 + timedelta(seconds=10 * n) for n in range(5)]
    pieces = [Chunk([f"{u}-{r}".encode() for r in range(u + 1)], [times[u]], [u + 1])
              for u in range(5)]
    whole = merged(pieces)
    assert len(whole.lines) == 15
    cut = split(whole, 4)
    assert [len(piece.lines) for piece in cut] == [4, 4, 4, 3]
    assert merged(cut).lines == whole.lines
    assert list(merged(cut).record_times()) == list(whole.record_times())
    assert [moment for piece in cut for moment in piece.record_times()][5] == times[2]
    assert decompress(compress(whole.lines)) == whole.lines
    assert one_line(b'{"a":\n 1}') == b'{"a":  1}'


async def indexed_then_compacted(db, **options):
    """Compaction leaves the chunks of uploads the hunt indexer has not read (its loop reads
    them within HUNT_INDEX_SECONDS): read first here."""
    assert (await index_pending(db, HuntBudget(20_000), 30)).left == 0
    return await compact(db, unread=UNREAD_UPLOAD, **options)


async def test_an_upload_not_indexed_yet_keeps_its_chunks_until_it_is(client, sql, settings):
    for n in range(4):  # (the module's client: no indexer's turn during the test)
        await upload(client, [record(n)])
    assert sql.value("SELECT count(*) FROM hunt_pending") == 4
    async with open_database(settings) as db:
        report = await compact(db, unread=UNREAD_UPLOAD, chunk_records=100, settle=timedelta(0))
        assert report.merged_chunks == 0 and len(chunk_rows(sql)) == 4
        report = await indexed_then_compacted(db, chunk_records=100, settle=timedelta(0))
    assert report.merged_chunks == 4 and chunk_rows(sql) == [(4, 4)]
    assert sql.value("SELECT count(*) FROM hunt_pending") == 0
    assert sql.value("SELECT records FROM hunt_postings WHERE kind = 'i' "
                     "AND value = '203.0.113.5'") == 4  # every upload's records, once


async def test_small_uploads_merged_into_chunks_and_every_record_kept(client, sql, settings):
    sent = []
    for n in range(0, 60, 2):  # the reference agent's 10-second uploads: two records each
        lines = [record(n), record(n + 1)]
        sent += lines
        await upload(client, lines)
    await upload(client, [record(7, "flow")], path="/log/cfm")
    assert len(chunk_rows(sql)) == 31
    before = [(r.received_at, r.line) for r in stored_records(sql.location, MAC, "events")]
    assert [line for _, line in before] == sent

    async with open_database(settings) as db:
        report = await indexed_then_compacted(db, chunk_records=25, settle=timedelta(0))
    assert (report.merged_chunks, report.written_chunks, report.records) == (30, 3, 60)
    # Chunks of 25, 25 and the rest; uploads split over two chunks keep their one time.
    assert [rows for rows, _ in chunk_rows(sql)][:3] == [25, 25, 10]
    after = [(r.received_at, r.line) for r in stored_records(sql.location, MAC, "events")]
    assert after == before
    assert stored_count(sql, "cfm") == 1  # alone in its kind: nothing to merge
    # The remainder is merged again with what comes next, up to full chunks.
    await upload(client, [record(100), record(101)])
    async with open_database(settings) as db:
        report = await indexed_then_compacted(db, chunk_records=25, settle=timedelta(0))
    assert (report.merged_chunks, report.records) == (2, 12)
    assert [r.line for r in stored_records(sql.location, MAC, "events")] == \
        sent + [record(100), record(101)]


def open_partition_end(sql) -> datetime:
    """When the chunks' partition uploads go to now ends."""
    now = datetime.now(timezone.utc)
    return next(partition.end for partition in partitions_from_rows(
        sql.rows(LIST_PARTITIONS, {"table": "telemetry_chunks"}))
        if (partition.start is None or partition.start <= now) and now < partition.end)


async def test_a_closed_partitions_remainder_is_compressed_hard_once(client, sql, settings):
    """While its partition may still take uploads, a remainder is compressed fast (the next
    run rewrites it); once the partition is closed, it is written for good: hard."""
    lines = [record(n) for n in range(7)]
    for first in range(0, 6, 2):
        await upload(client, lines[first:first + 2])
    end = open_partition_end(sql)

    def bodies() -> list[bytes]:
        return [bytes(body) for (body,) in sql.rows(
            "SELECT body FROM telemetry_chunks WHERE mac = %s", (MAC,))]

    async with open_database(settings) as db:
        await indexed_then_compacted(db, chunk_records=100, settle=timedelta(0))
        assert bodies() == [compress(lines[:6], INGEST_LEVEL)]
        await upload(client, lines[6:])
        await indexed_then_compacted(db, chunk_records=100, settle=timedelta(0),
                                     everything=True, now=end + timedelta(seconds=1))
    assert bodies() == [compress(lines, COMPACT_LEVEL)] != [compress(lines, INGEST_LEVEL)]


async def test_an_open_days_remainder_is_left_in_blocks_until_the_day_closes(
        client, sql, settings, monkeypatch):
    """While its day is open, a router's remainder is cut into blocks of OPEN_BLOCK_RECORDS
    that the next runs leave as they are (only the last, partial one is merged again), until
    they fill a full chunk or the day is closed: then they are merged into full chunks;
    every record keeps its time."""
    monkeypatch.setattr(compaction, "OPEN_BLOCK_RECORDS", 6)
    lines = [record(n) for n in range(22)]
    for first in range(0, 20, 2):
        await upload(client, lines[first:first + 2])
    end = open_partition_end(sql)

    def chunks() -> list[tuple]:
        return sql.rows("SELECT id, records, body FROM telemetry_chunks WHERE mac = %s "
                        "ORDER BY received_at, id", (MAC,))

    async with open_database(settings) as db:
        await indexed_then_compacted(db, chunk_records=100, settle=timedelta(0))
        blocks = chunks()
        assert [records for _, records, _ in blocks] == [6, 6, 6, 2]
        assert [bytes(body) for *_, body in blocks] == [
            compress(lines[:20][first:first + 6], INGEST_LEVEL) for first in range(0, 20, 6)]
        before = [(r.received_at, r.line) for r in stored_records(sql.location, MAC)]
        await upload(client, lines[20:])
        report = await indexed_then_compacted(db, chunk_records=100, settle=timedelta(0))
        assert (report.merged_chunks, report.records) == (2, 4)
        assert chunks()[:3] == blocks[:3]   # the full blocks, left as they were
        assert [records for _, records, _ in chunks()] == [6, 6, 6, 4]
        grown = [(r.received_at, r.line) for r in stored_records(sql.location, MAC)]
        assert grown[:20] == before and [line for _, line in grown] == lines
        # A router whose blocks and small chunks fill a chunk has them merged into it.
        await indexed_then_compacted(db, chunk_records=20, settle=timedelta(0))
        assert [(records, bytes(body)) for _, records, body in chunks()] == [
            (20, compress(lines[:20], COMPACT_LEVEL)), (2, compress(lines[20:], INGEST_LEVEL))]
        await indexed_then_compacted(db, chunk_records=100, settle=timedelta(0),
                                     everything=True, now=end + timedelta(seconds=1))
    assert [(records, bytes(body)) for _, records, body in chunks()] == [
        (22, compress(lines, COMPACT_LEVEL))]
    assert [(r.received_at, r.line) for r in stored_records(sql.location, MAC)] == grown


async def test_recent_chunks_wait_for_the_settle_time(client, sql, settings):
    for n in range(3):
        await upload(client, [record(n)])
    async with open_database(settings) as db:
        report = await compact(db, unread=UNREAD_UPLOAD, chunk_records=100, settle=timedelta(minutes=5))
    assert report.merged_chunks == 0 and len(chunk_rows(sql)) == 3


async def test_a_merge_that_fails_halfway_loses_and_doubles_nothing(client, sql, settings):
    for n in range(10):
        await upload(client, [record(n)])
    before = [r.line for r in stored_records(sql.location, MAC)]
    # The merged chunk cannot be written (a constraint the database checks after the small
    # chunks were deleted, in the same transaction): the merge fails whole.
    sql.rows("ALTER TABLE telemetry_chunks ADD CONSTRAINT one_record CHECK (records = 1)")
    async with open_database(settings) as db:
        with pytest.raises(Exception, match="one_record"):
            await indexed_then_compacted(db, chunk_records=100, settle=timedelta(0))
    assert [r.line for r in stored_records(sql.location, MAC)] == before
    assert len(chunk_rows(sql)) == 10
    sql.rows("ALTER TABLE telemetry_chunks DROP CONSTRAINT one_record")
    async with open_database(settings) as db:
        await indexed_then_compacted(db, chunk_records=100, settle=timedelta(0))
    assert [r.line for r in stored_records(sql.location, MAC)] == before
    assert chunk_rows(sql) == [(10, 10)]


async def test_uploads_go_on_while_merges_run(client, sql, settings):
    for n in range(200):
        await upload(client, [record(n)], mac=OTHER)
    sent = []

    async def uploads() -> None:
        for n in range(40):
            lines = [record(1000 + n)]
            sent.extend(lines)
            started = asyncio.get_running_loop().time()
            await upload(client, lines, mac=OTHER)
            assert asyncio.get_running_loop().time() - started < 2

    async with open_database(settings) as db:
        await asyncio.gather(uploads(), compact(db, unread=UNREAD_UPLOAD, chunk_records=50, settle=timedelta(0)))
        await compact(db, unread=UNREAD_UPLOAD, chunk_records=50, settle=timedelta(0))
    lines = [r.line for r in stored_records(sql.location, OTHER)]
    assert sorted(lines) == sorted([record(n) for n in range(200)] + sent)
    assert len(lines) == len(set(lines)) == 240


def run_command(settings, *args: str) -> subprocess.CompletedProcess:
    return router_backend(command_env(settings), "telemetry", *args, text=False)


async def test_export_command_streams_records_oldest_first(client, sql, settings):
    await upload(client, [record(1), record(2)])
    await upload(client, [record(3, "flow")], path="/log/cfm")
    await upload(client, [record(4)])
    await upload(client, [record(9)], mac=OTHER)
    times = sorted({r.received_at for r in stored_records(sql.location, MAC)})
    result = await asyncio.to_thread(run_command, settings, "export", "--mac",
                                     MAC.replace(":", "-").upper())
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"".join(line + b"\n" for line in
                                     (record(1), record(2), record(3, "flow"), record(4)))
    result = await asyncio.to_thread(run_command, settings, "export", "--mac", MAC,
                                     "--kind", "events", "--since", times[1].isoformat())
    assert result.stdout == record(4) + b"\n"
    result = await asyncio.to_thread(run_command, settings, "export", "--mac", MAC,
                                     "--until", times[1].isoformat())
    assert result.stdout == record(1) + b"\n" + record(2) + b"\n"
    result = await asyncio.to_thread(run_command, settings, "export", "--mac", "nonsense")
    assert result.returncode == 2 and b"MAC" in result.stderr  # a bad argument (issue 54)


async def test_sql_command_gives_the_row_tables_of_before(client, sql, settings):
    await upload(client, [record(n) for n in range(5)])
    await upload(client, [record(7, "flow")], path="/log/cfm")
    result = await asyncio.to_thread(
        run_command, settings, "sql", "--mac", MAC, "-At", "-c",
        "SELECT count(*), min(signature_id), max(severity), min(host(src_ip)) FROM ids_events")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == "5|2000000|3|203.0.113.5"
    assert b"5 records in ids_events, 1 in cfm_records" in result.stderr


async def test_stored_records_match_the_sql_tables(client, sql):
    await upload(client, [record(n) for n in range(3)])
    rows = telemetry(sql).rows("SELECT mac::text, ordinal, record FROM ids_events "
                               "ORDER BY chunk_id, ordinal")
    assert rows == [(MAC, n + 1, orjson.loads(record(n))) for n in range(3)]


async def test_hostile_flow_ids_keep_summary_rows_small(client, sql):
    huge = [orjson.dumps({"event_type": "alert", "flow_id": f"{n}" + "x" * 10_000,
                          "alert": {"signature_id": 1, "severity": 1}}) for n in range(70)]
    answer = await upload(client, huge)
    assert answer["accepted"] == 70
    alerts, kept, longest = sql.rows(
        "SELECT alerts, cardinality(flow_ids), (SELECT max(length(f)) FROM unnest(flow_ids) f) "
        "FROM telemetry_alerts WHERE mac = %s", (MAC,))[0]
    assert (alerts, kept) == (70, 64) and longest <= 40
    assert [r.line for r in stored_records(sql.location, MAC)] == huge  # the records whole


def test_legacy_batches_are_bounded_by_their_records_bytes():
    from server.telemetry.legacy import _within
    rows = [("m", 0, n, size) for n, size in enumerate([10, 20, 30, 40])]
    assert _within(rows, 35) == rows[:2]
    assert _within(rows, 5) == rows[:1]  # one record larger than the bound still moves
    assert _within(rows, 1_000) == rows


# Values that look like SQL or like the binding's own markers: the statements are bound a row
# at a time and joined (server/db/rows.py), so each must arrive as sent.
TRICKY = ["%s", "%(mac)s", "%%", "{values}", "{mac}", "it's", "back\\slash", "ünï", "a;b--"]


async def test_values_that_look_like_placeholders_are_stored_as_sent(client, sql):
    flows = [orjson.dumps({"event_type": "flow", "app_proto": name, "dest_port": 1000 + n,
                           "proto": "TCP"}) for n, name in enumerate(TRICKY)]
    alerts = [orjson.dumps({"event_type": "alert", "flow_id": name, "src_ip": "203.0.113.5",
                            "alert": {"signature_id": 7 + n, "severity": 1}})
              for n, name in enumerate(TRICKY)]
    await upload(client, flows * 2, path="/log/cfm")
    await upload(client, alerts)
    assert dict(sql.rows("SELECT app_proto, flows FROM telemetry_flows WHERE mac = %s "
                         "AND app_proto IS NOT NULL", (MAC,))) == {name: 2 for name in TRICKY}
    assert sql.value("SELECT count(*) FROM telemetry_flows WHERE mac = %s "
                     "AND dest_port IS NOT NULL", (MAC,)) == len(TRICKY)
    assert sql.rows("SELECT flow_ids[1] FROM telemetry_alerts WHERE mac = %s "
                    "ORDER BY signature_id", (MAC,)) == [(name,) for name in TRICKY]


def test_shared_values_that_look_like_placeholders_are_bound_as_sent(sql):
    statement = RowsInsert("SELECT * FROM (VALUES {values}) v (a, b, c) WHERE %(s)s IS NOT NULL",
                           "({s}, %s, %s)", [(TRICKY[0], 1), (None, 2)], {"s": "%(s)s {s} %"})
    conn = connect(sql.location)
    try:
        with conn.cursor() as cur:
            cur.execute(statement.text(cur))
            assert cur.fetchall() == [("%(s)s {s} %", "%s", 1), ("%(s)s {s} %", None, 2)]
    finally:
        conn.close()
