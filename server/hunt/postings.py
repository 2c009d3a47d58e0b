"""An upload's postings for the hunt index: which indicators its records carried and how
many records carried each, tallied from its stored chunks by the hunt indexer
(server/hunt/indexer.py) and written by server/hunt/sql.py's statement."""

from __future__ import annotations

from datetime import datetime

import orjson

from server.hunt.sql import ADD_PENDING
from server.telemetry.indicators import carried
from server.timestamps import utc_midnight

# Distinct values one upload may index: this many, plus this many more a record. An honest
# upload stays well inside (the corpus's sensor day: 79 for 1,013 records); a hostile one
# (records of thousands of distinct names, each posting its parents) adds to the index at
# most a few rows a record, as it adds to the telemetry a record, instead of thousands.
POSTINGS_FREE = 2_000
POSTINGS_PER_RECORD = 4
# New postings a router may add in a day (HUNT_POSTINGS_PER_ROUTER_DAY's default), across
# its uploads: server/hunt/sql.py counts them in the upload's statement.
POSTINGS_PER_ROUTER_DAY = 20_000


# Distinct triples an upload's announcement carries at most (PendingUpload); past it the
# indexer reads the upload's chunks, so the queue's row stays small (at most about 130 KB of
# JSON: 45-character addresses, 20-digit signature ids).
TRIPLES_ANNOUNCED = 1_000

Triple = tuple  # (src_ip, dest_ip, signature id), each None when absent


def triple_of(record: dict) -> Triple | None:
    """A record carrying nothing but its two addresses and a signature (flows, alerts
    without protocol metadata): that triple as sent (the signature only when an integer: on
    /log/cfm it is not checked, and a list there must not stop the tally); None for a record
    with dns, tls, http or fileinfo, which goes through indicators.carried."""
    get = record.get
    if get("dns") is not None or get("tls") is not None or get("http") is not None \
            or get("fileinfo") is not None:
        return None
    alert = get("alert")
    sid = alert.get("signature_id") if alert.__class__ is dict else None
    return get("src_ip"), get("dest_ip"), sid if sid.__class__ is int else None


class Postings:
    """Tallied cheaply per record: most records (flows, alerts without protocol metadata)
    carry only their two addresses and a signature, so they are counted by that triple as
    sent, and the triples turned into postings once per upload; the others go through
    indicators.carried one by one. Either way a record counts once for each value."""

    def __init__(self, budget: "PostingsBudget | None" = None) -> None:
        self.records = 0
        self.counts: dict[tuple[str, str], int] = {}
        self._triples: dict[tuple, int] = {}
        self.budget = budget if budget is not None else PostingsBudget()

    def __len__(self) -> int:
        return len(self.counts) + len(self._triples)

    def add(self, record: dict) -> None:
        """A stored record (its addresses checked as strings; its signature id checked only
        on /log/events, so anything else is left out here: a flow carrying a list there
        must not stop the tally)."""
        self.records += 1
        self.budget.left += POSTINGS_PER_RECORD
        triple = triple_of(record)
        if triple is None:
            self._count(carried(record), 1)
        else:
            self._triples[triple] = self._triples.get(triple, 0) + 1

    def add_announced(self, triples: bytes, records: int) -> None:
        """An upload's `records`, all of them counted by triple when it was received
        (PendingUpload's, in the order first seen): the same tally as `add` of each,
        without reading its chunks."""
        self.records += records
        self.budget.left += POSTINGS_PER_RECORD * records
        for src, dest, sid, count in orjson.loads(triples):
            triple = (src, dest, sid)
            self._triples[triple] = self._triples.get(triple, 0) + count

    def left_unread(self, records: int) -> None:
        """An upload's `records` not read at all (its router's day had no budget left): each
        counted as not indexed."""
        self.records += records
        self.budget.dropped += records

    def _count(self, found: list[tuple[str, str]], records: int) -> None:
        counts, budget = self.counts, self.budget
        left_out = False
        for key in (set(found) if len(found) > 1 else found):
            if key in counts:
                counts[key] += records
            elif budget.left > 0 and len(counts) < budget.ceiling:
                budget.left -= 1
                counts[key] = records
            else:
                left_out = True
        if left_out:
            budget.dropped += records

    def _settle(self) -> None:
        for (src, dest, sid), records in self._triples.items():
            self._count(carried({"src_ip": src, "dest_ip": dest,
                                 "alert": {"signature_id": sid}}), records)
        self._triples = {}

    def params(self, received_at: datetime) -> dict:
        """The hunt statement's values (server/hunt/sql.py), in key order: concurrent uploads
        of one router lock their rows in the same order; and the records tallied."""
        self._settle()
        return {"day": utc_midnight(received_at), "seen": received_at, "records": self.records,
                "rows": [{"code": code, "value": value, "records": count}
                         for (code, value), count in sorted(self.counts.items())]}


class PostingsBudget:
    """The distinct values an upload may still index (POSTINGS_FREE, POSTINGS_PER_RECORD), at
    most `ceiling` (what its router's day has left, and POSTINGS_FREE more so that values it
    posted earlier that day are still counted; none when the day has nothing left:
    server/hunt/indexer.py), and the records carrying a value it could not index."""

    def __init__(self, ceiling: int | None = None) -> None:
        self.left = POSTINGS_FREE
        self.ceiling = ceiling if ceiling is not None else 2**62
        self.dropped = 0


class PendingUpload:
    """An upload announced to the indexer's queue (ADD_PENDING, sent with its last chunk:
    server/telemetry/writer.py Announcement), with its records' triples counted from the
    records ingestion parsed anyway, so that the indexer need not read back an upload of
    flows and plain alerts (most uploads). Given up at the first record carrying more, or
    past TRIPLES_ANNOUNCED distinct triples: the indexer then reads that upload's chunks."""

    statement = ADD_PENDING

    def __init__(self) -> None:
        self._counts: dict[Triple, int] | None = {}

    def observe(self, record: dict) -> None:
        counts = self._counts
        if counts is None:
            return
        triple = triple_of(record)
        if triple is not None:  # (one lookup a record: this runs in every upload)
            if (seen := counts.get(triple)) is not None:
                counts[triple] = seen + 1
                return
            if len(counts) < TRIPLES_ANNOUNCED:
                counts[triple] = 1
                return
        self._counts = None

    def params(self) -> dict:
        """`pending_triples`: [[src, dest, sid, records], ...] in the order first seen, as
        JSON; None when the chunks must be read."""
        counts = self._counts
        return {"pending_triples": None if counts is None else
                orjson.dumps([[*triple, count] for triple, count in counts.items()])}
