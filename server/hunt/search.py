"""A hunt across the fleet: which routers' records carried any of some indicators over the
last days, from the hunt index (server/db/hunt.py), shaped once for the command and the
console, and recorded: the names households look up are personal data, so every hunt is
kept with who asked, when, what and how many matches (docs/security.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from server.db import hunt as hunt_db
from server.db.pool import Database
from server.settings import Settings
from server.telemetry.indicators import Indicator

MATCHES_SHOWN = 1_000  # per hunt: a value at every router gives the count and the first ones
LOG_SHOWN = 100  # hunts made, a page of the log
POSTINGS_READ = 20_000  # per hunt at most, past which the count is a lower bound
_ISO = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Hunt:
    indicators: tuple[Indicator, ...]
    days: int
    limit: int = MATCHES_SHOWN
    reads_at_most: int = POSTINGS_READ
    until: date | None = None  # the last day searched; None: today

    def window(self, today: date) -> tuple[date, date]:
        """The days searched, by when records were received (UTC): `days` of them up to
        `until` (or today), that day included. A hunt whose count stopped at its bound (a
        value many routers saw lately) reads older days by ending before the day it
        counted from."""
        last = min(self.until or today, today)
        return last - timedelta(days=self.days - 1), last

    def reads(self) -> int:
        """How many postings the hunt reads at most to find and count its matches."""
        return max(self.reads_at_most, self.limit)

    def asked(self) -> list[tuple[str, str]]:
        return [(i.code, i.stored) for i in self.indicators]


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime(_ISO)


async def routers_found(db: Database, hunt: Hunt, since: date,
                        until: date) -> tuple[list[tuple[str, int]], bool, date | None]:
    """The (router, indicator asked) pairs, the most recently seen first (then by router),
    reading at most `hunt.reads()` postings: all of them at once when there are no more,
    else a day partition at a time, newest first, so a value every router sees costs the
    same at any fleet size. Also whether every day was read, and the oldest day read whole
    (None when not even the newest was)."""
    asked = hunt.asked()
    rows = await hunt_db.window_pairs(db, asked, _midnight(since), _midnight(until),
                                      hunt.reads() + 1)
    if len(rows) <= hunt.reads():  # most hunts: every posting in one read
        return _newest_first(rows), True, since
    read: list[tuple[str, int, datetime]] = []
    left, day = hunt.reads(), until
    while day >= since:
        rows = await hunt_db.window_pairs(db, asked, _midnight(day), _midnight(day), left + 1)
        read += rows[:left]
        if len(rows) > left:  # this day read in part: the count is a lower bound
            return (_newest_first(read), False,
                    day + timedelta(days=1) if day < until else None)
        left -= len(rows)
        day -= timedelta(days=1)
    return _newest_first(read), True, since


def _newest_first(rows: list[tuple[str, int, datetime]]) -> list[tuple[str, int]]:
    """Each (router, indicator asked) once, by its latest posting read, then by router."""
    latest: dict[tuple[str, int], datetime] = {}
    for mac, asked, seen in rows:
        if (mac, asked) not in latest or seen > latest[(mac, asked)]:
            latest[(mac, asked)] = seen
    return sorted(latest, key=lambda pair: (-latest[pair].timestamp(), pair))


async def run_hunt(db: Database, hunt: Hunt, asked_by: str, via: str,
                   records_kept_days: int | None) -> dict:
    """The answer (one JSON object) of a hunt, recorded in `hunt_log`. Matches whose last
    day is older than `records_kept_days` (RETENTION_DAYS, None while retention is off) say
    their records expired: the index outlives the records (HUNT_RETENTION_DAYS)."""
    today = datetime.now(timezone.utc).date()
    since, until = hunt.window(today)
    found, counted_all, counted_from = await routers_found(db, hunt, since, until)
    shown = set(found[:hunt.limit])
    rows = await hunt_db.pairs(db, hunt.asked(), _midnight(since), _midnight(until),
                               sorted({mac for mac, _ in shown})) if shown else []
    rows = sorted((row for row in rows if (row[0], row[1]) in shown),
                  key=lambda row: (-row[3].timestamp(), row[0], row[1]))
    records_from = today - timedelta(days=records_kept_days) if records_kept_days else None
    matches = [_match(hunt.indicators[asked], mac, first, last, records, days, records_from)
               for mac, asked, first, last, records, days in rows]
    answer = {"searched": {"days": hunt.days, "from": since.isoformat(),
                           "to": until.isoformat()},
              "indicators": [{"kind": i.kind, "value": i.value} for i in hunt.indicators],
              "match_count": len(found), "match_count_exact": counted_all,
              "counted_from": counted_from.isoformat() if counted_from else None,
              "shown": len(matches), "matches": matches}
    await hunt_db.record_hunt(db, asked_by, via, json.dumps(answer["indicators"]), since,
                              until, len(found), counted_all)
    return answer


def _match(indicator: Indicator, mac: str, first: datetime, last: datetime, records: int,
           days: list[datetime], records_from: date | None) -> dict:
    return {"mac": mac, "kind": indicator.kind, "indicator": indicator.value,
            "first_seen": _iso(first), "last_seen": _iso(last), "records": records,
            "days": [day.astimezone(timezone.utc).date().isoformat() for day in days],
            "records_expired": records_from is not None
            and last.astimezone(timezone.utc).date() < records_from}


def count_text(answer: dict) -> str:
    """The match count as people read it: a lower bound says so and from which day."""
    if answer["match_count_exact"]:
        return str(answer["match_count"])
    whole = f", every day from {answer['counted_from']} counted" if answer["counted_from"] else ""
    return f"at least {answer['match_count']} (too many postings to count{whole})"


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
    try:
        if text.isascii() and len(text) == 10:
            return date.fromisoformat(text)
    except ValueError:
        pass
    raise ValueError(f"{text[:40]!r} is not a day (YYYY-MM-DD)")


def records_kept_days(settings: Settings) -> int | None:
    """How long records are kept: RETENTION_DAYS while the retention job runs, else None
    (nothing is deleted, DATA_RETENTION_ENABLED=false)."""
    return settings.retention_days if settings.data_retention_enabled else None
