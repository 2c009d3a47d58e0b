"""Time partitions of telemetry (chunks and summaries, migration 0018), `activations`
(migration 0014) and `activation_days` (migration 0019).

Partitions are TELEMETRY_PARTITION_DAYS long, on a grid of whole UTC days counted from
1970-01-01, named `<table>_pYYYYMMDD` after their first day. They are created ahead of time
(at start-up and by the hourly `partitions` job), so an insert always finds its partition:
there is no default partition, which would make every later partition's creation scan it
and would forbid `DETACH ... CONCURRENTLY`.

A new partition is created as a plain table and then attached: ATTACH takes only a SHARE
UPDATE EXCLUSIVE lock on the parent, so uploads in progress (even stalled ones) never wait
for it, nor it for them. Retention (server/jobs/retention.py) detaches old partitions
concurrently and drops them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone


from server.db.connect import connect
from server.db.location import DatabaseLocation

TIME_COLUMNS = {"telemetry_chunks": "received_at", "telemetry_alerts": "hour",
                "telemetry_flows": "hour", "telemetry_flow_days": "day",
                "telemetry_alert_days": "day",
                "activations": "activated_at", "activation_days": "day", "hunt_postings": "day"}
TELEMETRY_TABLES = ("telemetry_chunks", "telemetry_alerts", "telemetry_flows",
                    "telemetry_flow_days", "telemetry_alert_days")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
AHEAD = timedelta(days=7)        # partitions exist at least this far ahead of now
LOCK_KEY = 7_302_145_002         # one partition creator at a time across processes
LOCK_TIMEOUT = "10s"


@dataclass(frozen=True)
class Partition:
    name: str
    start: datetime | None       # None: MINVALUE (the legacy partition of migration 0014)
    end: datetime
    detaching: bool = False      # a DETACH CONCURRENTLY that was interrupted
    rows_estimate: int = 0       # PostgreSQL's estimate (reltuples; 0 before any ANALYZE)

    def older_than(self, cutoff: datetime) -> bool:
        return self.end <= cutoff

    def straddles(self, cutoff: datetime) -> bool:
        return (self.start is None or self.start < cutoff) and cutoff < self.end


# Bounds are read back through the server's own timestamptz parser, in the same session as
# pg_get_expr printed them, so neither the DateStyle nor the TimeZone can garble them.
LIST_PARTITIONS = r"""
SELECT c.relname,
       CASE WHEN b[1] = 'MINVALUE' THEN NULL ELSE btrim(b[1], '''')::timestamptz END,
       btrim(b[2], '''')::timestamptz, i.inhdetachpending,
       greatest(c.reltuples, 0)::bigint
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
     regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \((.+)\) TO \((.+)\)') b
WHERE i.inhparent = %(table)s::regclass
ORDER BY 2 NULLS FIRST"""


def partitions_from_rows(rows: list[tuple]) -> list[Partition]:
    return [Partition(*row) for row in rows]


def grid_floor(moment: datetime, days: int) -> datetime:
    length = timedelta(days=days)
    return EPOCH + ((moment - EPOCH) // length) * length


def missing_ranges(existing: list[Partition], start: datetime, end: datetime,
                   days: int) -> list[tuple[datetime, datetime]]:
    """The grid cells of [start, end), less what existing partitions cover: the ranges to
    create. Cells are cut where an existing partition (the legacy one, or partitions of an
    earlier TELEMETRY_PARTITION_DAYS) covers part of them."""
    ranges = []
    cell = grid_floor(start, days)
    while cell < end:
        following = cell + timedelta(days=days)
        free = [(cell, following)]
        for partition in existing:
            free = [piece for low, high in free
                    for piece in _subtract(low, high, partition.start, partition.end)]
        ranges += free
        cell = following
    return ranges


def _subtract(low: datetime, high: datetime, start: datetime | None, end: datetime
              ) -> list[tuple[datetime, datetime]]:
    """[low, high) less [start, end) (start None: from the beginning of time)."""
    if end <= low or (start is not None and start >= high):
        return [(low, high)]
    pieces = []
    if start is not None and start > low:
        pieces.append((low, start))
    if end < high:
        pieces.append((end, high))
    return pieces


def partition_name(table: str, start: datetime) -> str:
    return f"{table}_p{start.astimezone(timezone.utc):%Y%m%d}"


def create_statements(table: str, start: datetime, end: datetime) -> list[str]:
    """A plain table shaped like the parent (its columns' storage too), then attached (the
    parent's indexes and primary key are built on it, empty, by the ATTACH)."""
    name = partition_name(table, start)
    return [f"CREATE TABLE {name} (LIKE {table} INCLUDING STORAGE INCLUDING CONSTRAINTS)",
            f"ALTER TABLE {table} ATTACH PARTITION {name} "
            f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"]


def horizon(now: datetime, days: int) -> datetime:
    """How far ahead partitions must exist: a week, and at least two partitions."""
    return now + max(AHEAD, timedelta(days=2 * days))


def ensure_partitions(location: DatabaseLocation, days: int, now: datetime | None = None,
                      since: datetime | None = None) -> list[str]:
    """Blocking: create the partitions missing between now (or `since`, for benchmarks that
    load history) and the horizon, for every partitioned table; return their names. Safe to
    run from several processes at once."""
    now = now or datetime.now(timezone.utc)
    created = []
    conn = connect(location)
    try:
        for table in TIME_COLUMNS:
            while name := _create_next(conn, table, since or now, horizon(now, days), days):
                created.append(name)
    finally:
        conn.close()
    return created


def _create_next(conn, table: str, start: datetime, end: datetime, days: int) -> str | None:
    """Create the first missing partition of `table` in [start, end), in a transaction of
    its own (short locks); its name, or None when none is missing. Under Citus, where in
    each ATTACH PostgreSQL names the shards' new indexes, two connections of one
    transaction to one worker could pick the same name and wait on each other (a
    distributed deadlock): the shards are attached over one connection per worker
    (`citus.multi_shard_modify_mode`; on plain PostgreSQL a setting nothing reads)."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cur.execute("SET LOCAL citus.multi_shard_modify_mode = 'sequential'")
        cur.execute(LIST_PARTITIONS, {"table": table})
        missing = missing_ranges(partitions_from_rows(cur.fetchall()), start, end, days)
        if not missing:
            return None
        first, following = missing[0]
        for statement in create_statements(table, first, following):
            cur.execute(statement)
        return partition_name(table, first)
