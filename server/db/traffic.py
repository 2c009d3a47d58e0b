"""The fleet's traffic per minute (`telemetry_minutes`, `poll_minutes`): counts added up in a
process (server/ingest/tally.py), then written here in one transaction."""

from __future__ import annotations

from datetime import datetime

from server.db.pool import Database, execute

_ADD = ("INSERT INTO telemetry_minutes (minute, kind, accepted, rejected, uploads) "
        "SELECT * FROM unnest(%s::timestamptz[], %s::text[], %s::bigint[], %s::bigint[], "
        "%s::bigint[]) ON CONFLICT (minute, kind) DO UPDATE SET "
        "accepted = telemetry_minutes.accepted + EXCLUDED.accepted, "
        "rejected = telemetry_minutes.rejected + EXCLUDED.rejected, "
        "uploads = telemetry_minutes.uploads + EXCLUDED.uploads")
_ADD_POLLS = ("INSERT INTO poll_minutes (minute, polls) "
              "SELECT * FROM unnest(%s::timestamptz[], %s::bigint[]) "
              "ON CONFLICT (minute) DO UPDATE SET polls = poll_minutes.polls + EXCLUDED.polls")


async def add_counts(db: Database, uploads: dict[tuple[datetime, str], list[int]],
                     polls: dict[datetime, int]) -> None:
    """Add (minute, kind) -> [accepted, rejected, uploads] and minute -> polls to the
    stored counts, in one transaction."""
    async with db.transaction() as cur:
        if uploads:
            keys = list(uploads)
            await execute(cur, _ADD, ([minute for minute, _ in keys], [kind for _, kind in keys],
                                      [uploads[key][0] for key in keys],
                                      [uploads[key][1] for key in keys],
                                      [uploads[key][2] for key in keys]))
        if polls:
            await execute(cur, _ADD_POLLS, (list(polls), list(polls.values())))
