"""A week of a router, and of an owner's routers, as figures: what the weekly report says
and the notification's metadata holds (docs/notification-api.md, `weekly_report`).

An owner's report lists TOP_ROUTERS routers, those that want a look first (gone quiet,
rules not current, sightings, then the most alerts), and counts the rest in its totals,
so that an owner of 10,000 routers gets one bounded report."""

from __future__ import annotations

from datetime import datetime, timedelta

from server.intel.owners import sighting_fields
from server.intel.sql import SIGHTINGS_LISTED
from server.text import is_plain_text

QUIET_HOURS = 24    # a router with no contact this long before the week's end has gone quiet
TOP_ROUTERS = 20
MAX_NAME = 120
SEVERITIES = {"1": "high", "2": "medium", "3": "low"}  # Suricata's: 1 is the most severe


def ownership_start(start: datetime, end: datetime, owner_since: datetime | None) -> datetime:
    """Where a router's period [start, end) starts for its owner: `start`, or the first
    whole hour of the ownership when it began later (the summaries are hourly: the hour of
    the change is nobody's, as docs/intel.md says of its second)."""
    if owner_since is None or owner_since <= start:
        return start
    hour = owner_since.replace(minute=0, second=0, microsecond=0)
    return min(end, hour if hour == owner_since else hour + timedelta(hours=1))


def _empty(mac: str) -> dict:
    return {"mac": mac,
            "alerts": {"total": 0, "high": 0, "medium": 0, "low": 0, "other": 0},
            "top_remote": [], "top_signatures": [],
            "sightings": {"count": 0, "listed": []},
            "rules": {"state": "none", "reported_at": None},
            "last_contact": None, "quiet": True, "blocked": None}


def router_weeks(rows: dict, macs: list[str], end: datetime,
                 names: dict[int, str]) -> list[dict]:
    """Each of `macs`' figures from sql.py `week_rows`; `names`: signatures' messages."""
    weeks = {mac: _empty(mac) for mac in macs}
    for mac, what, key, count in rows["alerts"]:
        week = weeks[mac]
        if what == "severity":
            week["alerts"][SEVERITIES.get(key, "other")] += count
            week["alerts"]["total"] += count
        elif what == "remote":
            week["top_remote"].append({"address": key, "alerts": count})
        else:
            week["top_signatures"].append({"sid": int(key), "name": _name(names, int(key)),
                                           "alerts": count})
    for row in rows["sightings"]:
        sightings = weeks[row[0]]["sightings"]
        sightings["count"] = row[9]
        sightings["listed"].append(sighting_fields(row))
    for mac, ok, reported_at, current in rows["rules"]:
        weeks[mac]["rules"] = {"state": _rules_state(ok, current),
                               "reported_at": reported_at and reported_at.isoformat()}
    for mac, list_, packets, bytes_ in rows["blocked"]:
        blocked = weeks[mac]["blocked"] = weeks[mac]["blocked"] or {
            "packets": 0, "bytes": 0, "firewall": 0, "fleet": 0, "intel": 0}
        blocked[list_] = int(packets)
        blocked["packets"] += int(packets)
        blocked["bytes"] += int(bytes_)
    for mac, contact in rows["contacts"]:
        weeks[mac]["last_contact"] = contact and contact.isoformat()
        weeks[mac]["quiet"] = contact is None or end - contact > timedelta(hours=QUIET_HOURS)
    for week in weeks.values():
        for listing in (week["top_remote"], week["top_signatures"]):
            listing.sort(key=lambda entry: -entry["alerts"])
        week["sightings"]["listed"].sort(key=lambda s: s["last_seen"], reverse=True)
        del week["sightings"]["listed"][SIGHTINGS_LISTED:]
    return list(weeks.values())


def _rules_state(ok: bool | None, current: bool) -> str:
    """current: loaded what it was last given; behind: loaded an earlier one; failed: its
    last load failed; unreported: it never said (reporting is optional for agents)."""
    if ok is None:
        return "unreported"
    if not ok:
        return "failed"
    return "current" if current else "behind"


def _name(names: dict[int, str], sid: int) -> str | None:
    name = names.get(sid)
    if name is None or not is_plain_text(name):
        return None
    return name[:MAX_NAME]


def _attention(week: dict) -> tuple:
    return (not week["quiet"], week["rules"]["state"] == "current",
            -week["sightings"]["count"], -week["alerts"]["total"], week["mac"])


def owner_report(start: datetime, end: datetime, zone: str, weeks: list[dict]) -> dict:
    """An owner's week: totals over every router, TOP_ROUTERS of them listed."""
    ordered = sorted(weeks, key=_attention)
    totals = {"routers": len(weeks),
              "alerts": sum(week["alerts"]["total"] for week in weeks),
              "sightings": sum(week["sightings"]["count"] for week in weeks),
              "quiet_routers": sum(1 for week in weeks if week["quiet"]),
              "rules_not_current": sum(1 for week in weeks
                                       if week["rules"]["state"] != "current"),
              "blocked_packets": sum(week["blocked"]["packets"] for week in weeks
                                     if week["blocked"])}
    return {"period": {"start": start.isoformat(), "end": end.isoformat(), "zone": zone},
            "all_quiet": totals["alerts"] == 0 and totals["sightings"] == 0,
            "totals": totals, "routers": ordered[:TOP_ROUTERS],
            "routers_not_listed": max(0, len(weeks) - TOP_ROUTERS)}
