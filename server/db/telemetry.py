"""What the database says of an upload whose commit was in doubt (the connection failed
while its last write or COMMIT was under way): the errors telemetry writes raise, and
`was_committed`, which settles the doubt. The writes themselves: server/telemetry/writer.py.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from server.db.pool import Database, DatabaseUnavailable, execute


class CommitInDoubt(Exception):
    """The connection failed while the request's last write (a single batch) or its COMMIT
    was under way: the rows may or may not be stored. `backend_pid`: the PostgreSQL process
    that held the write (see was_committed)."""

    def __init__(self, backend_pid: int, reason: str):
        super().__init__(reason)
        self.backend_pid = backend_pid


class KeyAlreadyUsed(Exception):
    """The upload's Idempotency-Key was recorded by an earlier upload: nothing was stored."""


class StoredUnknown(DatabaseUnavailable):
    """Answered 503 with `"stored": "unknown"`: after CommitInDoubt the database could not be
    asked whether the rows were stored."""

    stored_unknown = True


# pg_terminate_backend(pid, timeout) waits for the process to end (PostgreSQL 14+).
_END_BACKEND = ("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE pid = %(pid)s AND usename = current_user")
_STORED_RECORDS = ("SELECT coalesce(sum(records), 0) FROM telemetry_chunks "
                   "WHERE mac = %(mac)s AND kind = %(kind)s AND received_at = %(at)s")


async def was_committed(db: Database, kind: str, mac: str, received_at: datetime,
                        doubt: CommitInDoubt, rows: int) -> bool:
    """Settle a CommitInDoubt: end the backend that held the write if it still lives (after
    a network cut it waits in its transaction, and a COMMIT held up on the way could land
    after our answer), then count the request's records, found by (mac, kind, received_at): all
    of them stored (True) or none (False). StoredUnknown when the database cannot be asked."""
    try:
        async with db.cursor() as cur:
            await execute(cur, _END_BACKEND, {"pid": doubt.backend_pid})
            ended = await cur.fetchone()
            if ended is not None and not ended[0]:
                raise StoredUnknown(f"the connection was lost while storing ({doubt}) and "
                                    "its database session did not end")
            await execute(cur, _STORED_RECORDS, {"mac": mac, "kind": kind, "at": received_at})
            stored = (await cur.fetchone())[0]
    except StoredUnknown:
        raise
    except DatabaseUnavailable as error:
        raise StoredUnknown(f"the connection was lost while storing ({doubt}) and the "
                            f"database could not be asked whether it was stored ({error})"
                            ) from error
    if stored not in (0, rows):
        raise StoredUnknown(f"{stored} records found for a request of {rows}")
    return stored == rows


def backend_pid(cur: psycopg.AsyncCursor) -> int:
    """The PostgreSQL process of a cursor's connection (known locally, no round trip)."""
    return cur.connection.info.backend_pid
