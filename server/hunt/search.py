"""A hunt across the fleet: which routers' records carried any of some indicators over the
last days, from the hunt index (server/hunt/sql.py), shaped once for the command and the
console, and recorded: the names households look up are personal data, so every hunt is
kept with who asked, when, what and how many matches (docs/security.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from server.hunt import sql as hunt_db
from server.db.pool import Database
from server.hunt.config import HuntConfig
from server.hunt.indexer import caught_up, pending_note
from server.hunt.sightings import Seen, Sightings, sightings
from server.telemetry.indicators import Indicator

MATCHES_SHOWN = 1_000  # per page of a hunt
LOG_SHOWN = 100  # hunts made, a page of the log
UNPACKED_READS = 20_000  # per indicator, of its postings still in rows (today's)
_ISO = "%Y-%m-%dT%H:%M:%SZ"
FIRST_DAY = date(1970, 1, 1)  # the earliest --until: a window's days stay representable


@dataclass(frozen=True)
class Hunt:
    indicators: tuple[Indicator, ...]
    days: int
    limit: int = MATCHES_SHOWN
    offset: int = 0  # matches left out before the page shown
    until: date | None = None  # the last day searched; None: today
    unpacked_reads: int = UNPACKED_READS

    def window(self, today: date) -> tuple[date, date]:
        """The days searched, by when records were received (UTC): `days` of them up to
        `until` (or today), that day included."""
        last = min(self.until or today, today)
        return last - timedelta(days=self.days - 1), last

    def wanted(self) -> int:
        """Matches each indicator must rank to fill the page: with one indicator found
        alone, it fills the page."""
        return self.offset + self.limit

    def asked(self) -> tuple[list[tuple[str, str]], list[int]]:
        """The index's values the hunt reads, and the indicator each is one of (a network
        is each of its addresses)."""
        values, slots = [], []
        for n, wanted in enumerate(self.indicators):
            for value in wanted.postings():
                values.append(value)
                slots.append(n)
        return values, slots


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime(_ISO)


async def hunt_indexed(db: Database, config: HuntConfig, hunt: Hunt, asked_by: str,
                       via: str) -> dict:
    """A hunt as a person asks it (the command, the console): every upload acknowledged
    before it indexed first (waiting up to HUNT_WAIT_SECONDS for an indexer at work), and
    what could not be waited for said in its notes."""
    left = await caught_up(db, config.budget, config.lanes)
    return await run_hunt(db, hunt, asked_by, via, config.records_kept_days, pending=left)


async def run_hunt(db: Database, hunt: Hunt, asked_by: str, via: str,
                   records_kept_days: int | None, pending: int = 0) -> dict:
    """The answer (one JSON object) of a hunt, recorded in `hunt_log`.

    Matches are (router, indicator) pairs. Each indicator's are ranked earliest sighting
    first (then by router); a page takes every indicator's first, then every indicator's
    second, and so on, so no indicator's matches crowd out another's, and no router can push
    an earlier sighting off the first page but by having been earlier. Counts are exact but
    when an indicator's postings still in rows (today's, before packing) outnumber
    `hunt.unpacked_reads`: then that indicator's count is a lower bound and says so. Matches
    whose last day is older than `records_kept_days` (RETENTION_DAYS, None while retention
    is off) say their records expired: the index outlives the records. `pending`: uploads
    acknowledged before the hunt that the indexer had not read (server/hunt/indexer.py's
    `caught_up`), said in the notes."""
    today = datetime.now(timezone.utc).date()
    since, until = hunt.window(today)
    values, slots = hunt.asked()
    found = await sightings(db, values, slots, _midnight(since), _midnight(until),
                            hunt.wanted(), hunt.unpacked_reads)
    pairs = _fair_order(found)
    page = pairs[hunt.offset:hunt.offset + hunt.limit]
    records_from = today - timedelta(days=records_kept_days) if records_kept_days else None
    networks = await _networks(db, [seen for _, seen in page])
    matches = [_match(hunt.indicators[n], seen, records_from, networks) for n, seen in page]
    total = sum(s.count for s in found)
    exact = all(s.exact for s in found)
    answer = {"searched": {"days": hunt.days, "from": since.isoformat(),
                           "to": until.isoformat(), "by": "day received"},
              "indicators": [{"kind": i.kind, "value": i.value, "match_count": s.count,
                              "match_count_exact": s.exact}
                             for i, s in zip(hunt.indicators, found)],
              "match_count": total, "match_count_exact": exact,
              "offset": hunt.offset, "shown": len(matches),
              "more": len(matches) == hunt.limit and hunt.offset + len(matches) < total,
              "order": "earliest sighting first, each indicator in turn",
              "notes": pending_note(pending)
              + await _notes(db, hunt, today, since, until, total),
              "matches": matches}
    await hunt_db.record_hunt(db, asked_by, via, json.dumps(
        [{"kind": i.kind, "value": i.value} for i in hunt.indicators]), since, until, total,
        exact)
    return answer


async def _notes(db: Database, hunt: Hunt, today: date, since: date, until: date,
                 total: int) -> list[str]:
    """What a user should know to read the answer right: a window cut at today, or one
    that holds no day of the index."""
    notes = []
    if hunt.until and hunt.until > today:
        notes.append(f"--until {hunt.until} is after today: searched to {today}")
    if total == 0:
        first = (await db.fetchone(hunt_db.FIRST_PACKED_DAY))[0]
        first_day = first.astimezone(timezone.utc).date() if first else today
        if until < first_day:
            notes.append(f"the index begins on {first_day}, after the days searched: days "
                         "are the days records were received, not the events' own times")
    return notes


def _fair_order(found: list["Sightings"]) -> list[tuple[int, "Seen"]]:
    """Every indicator's first match, then every indicator's second..., each indicator's
    earliest first."""
    ranked = []
    for n, sightings_of in enumerate(found):
        for rank, seen in enumerate(sightings_of.earliest):
            ranked.append((rank, seen.first, n, seen.mac, seen))
    ranked.sort(key=lambda row: row[:4])
    return [(n, seen) for _, _, n, _, seen in ranked]


async def _networks(db: Database, page: list["Seen"]) -> dict[tuple[str, date], list[str]]:
    """The networks each shown router's uploads came from on the first and last day it
    matched (kept by the indexer with the router's day: server/hunt/sql.py, at most
    NETWORKS_KEPT a day): two days a match, so a page of a value every router saw over 400
    days reads 2,000 rows, not 400,000."""
    pairs = sorted({(seen.mac, day) for seen in page for day in _ends(seen)})
    if not pairs:
        return {}
    rows = await db.fetchall(hunt_db.ROUTER_DAY_NETWORKS, {
        "macs": [mac for mac, _ in pairs], "days": [_midnight(day) for _, day in pairs]})
    return {(mac, day.astimezone(timezone.utc).date()): networks
            for mac, day, networks in rows}


def _ends(seen: "Seen") -> list[date]:
    return [seen.days[0], seen.days[-1]] if seen.days else []


def _match(indicator: Indicator, seen: "Seen", records_from: date | None,
           networks: dict[tuple[str, date], list[str]]) -> dict:
    return {"mac": seen.mac, "kind": indicator.kind, "indicator": indicator.value,
            "first_seen": _iso(seen.first), "last_seen": _iso(seen.last),
            "records": seen.records, "days": [day.isoformat() for day in seen.days],
            "networks": sorted({network for day in _ends(seen)
                                for network in networks.get((seen.mac, day), ())}),
            "records_expired": records_from is not None
            and seen.last.astimezone(timezone.utc).date() < records_from}


def count_text(answer: dict) -> str:
    """The match count as people read it: a lower bound says so and from which day."""
    if answer["match_count_exact"]:
        return str(answer["match_count"])
    return (f"at least {answer['match_count']} (today's postings of a value seen by too "
            "many routers to count until they are packed)")


async def hunt_log(db: Database, limit: int = LOG_SHOWN, skip: int = 0) -> list[dict]:
    """The hunts and drill-downs made, newest first, `skip` left out: what operators read of
    who asked what."""
    return [{"at": at, "asked_by": who, "via": via, "indicators": indicators,
             "from": since.isoformat(), "to": until.isoformat(), "matches": matches,
             "matches_exact": exact, "router": router}
            for at, who, via, indicators, since, until, matches, exact, router
            in await hunt_db.hunts(db, limit, skip)]


def day_asked(text: str) -> date:
    """The last day a hunt searches, as asked (YYYY-MM-DD, ASCII); ValueError saying what is
    wrong."""
    wrong = ValueError(f"{text[:40]!r} is not a day (YYYY-MM-DD)")
    if not (text.isascii() and len(text) == 10):
        raise wrong
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise wrong from None
    if day < FIRST_DAY:
        raise ValueError(f"{text} is before {FIRST_DAY}: nothing was received then")
    return day
