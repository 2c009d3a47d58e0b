"""What the index gained since a moment: the values posted from then on, for a reader that
needs only what is new (the threat intelligence's match each minute: its cost follows the
uploads of the last minutes, not the feeds' size)."""

from __future__ import annotations

from datetime import datetime, timedelta

from server.db.pool import Database
from server.hunt import sql as hunt_db

# Uploads whose transaction began before a mark was taken but committed after it carry a
# written_at before it: a mark is taken this far back (longer than an upload's statements
# may take, DB_TIMEOUT_SECONDS each); what is read twice is matched twice, which adds nothing.
MARK_MARGIN = timedelta(minutes=5)


async def indexed_until(db: Database) -> datetime:
    """The mark from which the index may still gain postings: the oldest upload not indexed
    yet (or now), less MARK_MARGIN."""
    (moment,) = await db.fetchrow(hunt_db.PENDING_FROM)
    return moment - MARK_MARGIN


async def posted_since(db: Database, since: datetime, first_day: datetime
                       ) -> list[tuple[str, str]]:
    """(code, stored value) of every value posted from `since` on, on the day starting at
    `first_day` (a UTC midnight) or later (postings still in rows: the days packed gain
    none)."""
    return await db.fetchall(hunt_db.POSTED_SINCE, {"since": since, "first_day": first_day})
