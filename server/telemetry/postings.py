"""An upload's postings for the hunt index: which indicators its records carried and how
many records carried each, written with its records in the same transaction
(server/db/hunt.py), so that a record is huntable as soon as it is acknowledged."""

from __future__ import annotations

from datetime import datetime, timezone

from server.telemetry.indicators import carried

# A posting row per distinct value: an upload of this many is written with its next chunk,
# as the summary is (bounded memory for any upload).
POSTINGS_KEPT = 10_000


_PROTOCOLS = ("dns", "tls", "http", "fileinfo")  # what carries more than addresses and a sid


class Postings:
    """Tallied cheaply per record: most records (flows, alerts without protocol metadata)
    carry only their two addresses and a signature, so they are counted by that triple as
    sent, and the triples turned into postings once per upload; the others go through
    indicators.carried one by one. Either way a record counts once for each value."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self._triples: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self.counts) + len(self._triples)

    def add(self, record: dict) -> None:
        """A stored record (checked: its addresses are strings, its sid an integer)."""
        get = record.get
        if get("dns") is None and get("tls") is None and get("http") is None \
                and get("fileinfo") is None:
            alert = get("alert")
            triple = (get("src_ip"), get("dest_ip"),
                      alert.get("signature_id") if alert.__class__ is dict else None)
            self._triples[triple] = self._triples.get(triple, 0) + 1
            return
        self._count(carried(record), 1)

    def _count(self, found: list[tuple[str, str]], records: int) -> None:
        counts = self.counts
        for key in (set(found) if len(found) > 1 else found):
            counts[key] = counts.get(key, 0) + records

    def _settle(self) -> None:
        for (src, dest, sid), records in self._triples.items():
            self._count(carried({"src_ip": src, "dest_ip": dest,
                                 "alert": {"signature_id": sid}}), records)
        self._triples = {}

    def params(self, received_at: datetime) -> dict:
        """The hunt statement's values (server/db/hunt.py), in key order: concurrent uploads
        of one router lock their rows in the same order."""
        self._settle()
        day = received_at.astimezone(timezone.utc).replace(hour=0, minute=0, second=0,
                                                           microsecond=0)
        return {"day": day, "seen": received_at,
                "rows": [{"code": code, "value": value, "records": count}
                         for (code, value), count in sorted(self.counts.items())]}
