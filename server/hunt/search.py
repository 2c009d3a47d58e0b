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
from server.telemetry.indicators import Indicator

MATCHES_SHOWN = 1_000  # per hunt: a value at every router gives the count and the first ones
_ISO = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Hunt:
    indicators: tuple[Indicator, ...]
    days: int
    limit: int = MATCHES_SHOWN

    def window(self, today: date) -> tuple[date, date]:
        """The days searched, by when records were received (UTC), today included."""
        return today - timedelta(days=self.days - 1), today

    def asked(self) -> list[tuple[str, str, bool]]:
        return [(i.code, i.stored, i.kind == "domain") for i in self.indicators]


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime(_ISO)


async def run_hunt(db: Database, hunt: Hunt, asked_by: str, via: str,
                   records_kept_days: int) -> dict:
    """The answer (one JSON object) of a hunt, recorded in `hunt_log`. Matches whose last
    day is older than `records_kept_days` (RETENTION_DAYS) say their records expired: the
    index outlives the records (HUNT_RETENTION_DAYS)."""
    today = datetime.now(timezone.utc).date()
    since, until = hunt.window(today)
    rows = await hunt_db.hunt(db, hunt.asked(), _midnight(since), _midnight(until),
                              hunt.limit)
    records_from = today - timedelta(days=records_kept_days)
    matches = []
    for mac, asked, first, last, records, days, values, _ in rows:
        indicator = hunt.indicators[asked]
        match = {"mac": mac, "kind": indicator.kind, "indicator": indicator.value,
                 "first_seen": _iso(first), "last_seen": _iso(last), "records": records,
                 "days": [day.astimezone(timezone.utc).date().isoformat() for day in days],
                 "records_expired": last.astimezone(timezone.utc).date() < records_from}
        if indicator.kind == "domain":
            match["names"] = sorted(".".join(reversed(value.split("."))) for value in values)
        matches.append(match)
    total = rows[0][7] if rows else 0
    answer = {"searched": {"days": hunt.days, "from": since.isoformat(),
                           "to": until.isoformat()},
              "indicators": [{"kind": i.kind, "value": i.value} for i in hunt.indicators],
              "match_count": total,
              "shown": len(matches), "matches": matches}
    await hunt_db.record_hunt(db, asked_by, via, json.dumps(answer["indicators"]), since,
                              until, total)
    return answer


async def hunt_log(db: Database, limit: int = 100) -> list[dict]:
    """The latest hunts, newest first: what operators read of who asked what."""
    return [{"at": at, "asked_by": who, "via": via, "indicators": indicators,
             "from": since.isoformat(), "to": until.isoformat(), "matches": matches}
            for at, who, via, indicators, since, until, matches
            in await hunt_db.hunts(db, limit)]
