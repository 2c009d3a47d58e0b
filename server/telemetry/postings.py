"""An upload's postings for the hunt index: which indicators its records carried and how
many records carried each, written with its records in the same transaction
(server/db/hunt.py), so that a record is huntable as soon as it is acknowledged."""

from __future__ import annotations

from datetime import datetime, timezone

from server.telemetry.indicators import carried

# A posting row per distinct value: an upload of this many is written with its next chunk,
# as the summary is (bounded memory for any upload).
POSTINGS_KEPT = 10_000


class Postings:
    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self.counts)

    def add(self, record: dict) -> None:
        """A stored record: each value it carries counted once for it."""
        for key in set(carried(record)):
            self.counts[key] = self.counts.get(key, 0) + 1

    def params(self, received_at: datetime) -> dict:
        """The hunt statement's values (server/db/hunt.py), in key order: concurrent uploads
        of one router lock their rows in the same order."""
        day = received_at.astimezone(timezone.utc).replace(hour=0, minute=0, second=0,
                                                           microsecond=0)
        return {"day": day, "seen": received_at,
                "rows": [{"code": code, "value": value, "records": count}
                         for (code, value), count in sorted(self.counts.items())]}
