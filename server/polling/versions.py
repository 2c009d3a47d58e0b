"""The versions of a shared document, numbered by a serial and kept in the database
(migration 0041): what changed from any version kept to another is answered by any process
on any host, after any restart, from the database, not from what one process remembers.

A version's content is a set of items (place, item): a dataset line under its file's name,
a block entry under "block" (engine/intel.py `items`). Each item is stored once per stretch
of versions it is in: `since_serial` to `until_serial` (excluded; NULL while in the latest).
So a version costs the rows of what changed, not of what it holds, and the change between
serials s and c (s < c) is two indexed reads:
- added: items that came in after s, up to c, and had not left again by c;
- removed: items in s that left after s, up to c;
an item in both (it left and came back) is in neither.

Recording takes an advisory lock per document, so that two processes building the same
version record it once (the second finds it as the latest) and a process whose state is
older than the latest recorded never records over it: its version gets the serial of an
equal version kept, or none (its routers get whole documents until it rebuilds).
Versions older than KEPT_DAYS are deleted with the items that left before the oldest
version kept; the latest is always kept."""

from __future__ import annotations

import zlib
from datetime import datetime

from server.db.pool import Database, Reads, execute

KEPT_DAYS = 7  # a router away for a week still gets a delta; about 170 hourly versions

_LOCK = "SELECT pg_advisory_xact_lock(%s)"
_LATEST = """SELECT serial, etag, made_at FROM document_versions WHERE document = %s
ORDER BY serial DESC LIMIT 1"""
_ITEMS_TABLE = """CREATE TEMPORARY TABLE version_items (place text, item text COLLATE "C")
ON COMMIT DROP"""
_ITEMS_COPY = "COPY version_items FROM STDIN"
_CLOSE = """UPDATE document_items d SET until_serial = %(serial)s
WHERE d.document = %(document)s AND d.until_serial IS NULL AND NOT EXISTS (
    SELECT 1 FROM version_items v WHERE v.place = d.place AND v.item = d.item)"""
_OPEN = """INSERT INTO document_items (document, place, item, since_serial)
SELECT DISTINCT %(document)s, v.place, v.item, %(serial)s FROM version_items v
WHERE NOT EXISTS (SELECT 1 FROM document_items d WHERE d.document = %(document)s
                  AND d.until_serial IS NULL AND d.place = v.place AND d.item = v.item)"""
_ADD = """INSERT INTO document_versions (document, serial, etag, made_at, entries)
VALUES (%(document)s, %(serial)s, %(etag)s, %(made_at)s, %(entries)s)"""
_PRUNE_VERSIONS = f"""DELETE FROM document_versions WHERE document = %(document)s
AND serial < %(serial)s AND made_at < now() - interval '{KEPT_DAYS} days'"""
_PRUNE_ITEMS = """DELETE FROM document_items WHERE document = %(document)s
AND until_serial <= (SELECT min(serial) FROM document_versions
                     WHERE document = %(document)s)"""
# The serial of the version `since` names (the latest of equal versions: equal content,
# equal items), kept and no later than `serial`.
_SINCE = """SELECT max(serial) FROM document_versions
WHERE document = %s AND etag = %s AND serial <= %s"""
_ADDED = """SELECT place, item FROM document_items
WHERE document = %(document)s AND since_serial > %(since)s AND since_serial <= %(serial)s
  AND (until_serial IS NULL OR until_serial > %(serial)s)"""
_REMOVED = """SELECT place, item FROM document_items
WHERE document = %(document)s AND since_serial <= %(since)s
  AND until_serial > %(since)s AND until_serial <= %(serial)s"""


def held_item(documents: str, place: str, prefix: str) -> str:
    """SQL: whether a current version of one of the documents %(documents)s (a text[]
    parameter) holds an item of `place` beginning with the text `prefix` and a space."""
    return f"""EXISTS (SELECT 1 FROM document_items d
        WHERE d.document = ANY({documents}::text[]) AND d.place = '{place}'
          AND d.until_serial IS NULL
          AND d.item >= {prefix} || ' ' AND d.item < {prefix} || '!')"""


def _lock_key(document: str) -> int:
    return zlib.crc32(f"document-versions:{document}".encode())


async def record(db: Database, document: str, etag: str, items: set[tuple[str, str]],
                 entries: int, made_at: datetime) -> int | None:
    """The serial of this version of `document` (built from the state read at `made_at`):
    the latest's when it is equal, a new one when it is newer than the latest, an equal
    kept version's when it is older, else None."""
    async with db.transaction() as cur:
        await execute(cur, _LOCK, (_lock_key(document),))
        await execute(cur, _LATEST, (document,))
        latest = await cur.fetchone()
        if latest is not None and latest[1] == etag:
            return latest[0]
        if latest is not None and latest[2] >= made_at:
            await execute(cur, _SINCE, (document, etag, latest[0]))
            equal = await cur.fetchone()
            return None if equal is None else equal[0]
        serial = 1 if latest is None else latest[0] + 1
        await execute(cur, _ITEMS_TABLE)
        async with cur.copy(_ITEMS_COPY) as copy:
            for item in items:
                await copy.write_row(item)
        await execute(cur, "ANALYZE version_items")
        names = {"document": document, "serial": serial, "etag": etag, "made_at": made_at,
                 "entries": entries}
        for statement in (_CLOSE, _OPEN, _ADD, _PRUNE_VERSIONS, _PRUNE_ITEMS):
            await execute(cur, statement, names)
        return serial


async def changes_since(db: Database, document: str, etag: str, serial: int
                        ) -> tuple[int, set[tuple[str, str]], set[tuple[str, str]]] | None:
    """(the serial of the version of ETag `etag`, what version `serial` adds to it, what it
    removes), all read of one state of the tables, so that a prune between the reads never
    leaves a change without what it removed; None when that version is not kept before
    `serial`."""
    async with db.snapshot() as reads:
        (start,), = await reads.fetchall(_SINCE, (document, etag, serial))
        if start is None or start >= serial:
            return None
        added, removed = await _changes(reads, document, start, serial)
    return start, added, removed


async def changes(db: Database, document: str, since: int,
                  serial: int) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """What version `serial` adds to version `since`, and what it removes from it."""
    async with db.snapshot() as reads:  # both reads of one state of the table
        return await _changes(reads, document, since, serial)


async def _changes(reads: Reads, document: str, since: int, serial: int
                   ) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    names = {"document": document, "since": since, "serial": serial}
    added = set(await reads.fetchall(_ADDED, names))
    removed = set(await reads.fetchall(_REMOVED, names))
    both = added & removed  # in both versions, gone and back between: no change
    return added - both, removed - both
