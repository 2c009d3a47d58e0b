"""The weekly report as the owner reads it: a title and a plain-text message that reads
well in any mail client (lines under 80 characters but for long names, no markup), built
from the figures alone (figures.py). Every value in it is the service's (a MAC, an address,
a number, a time) or was checked as plain text (a signature's name, an indicator)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from server.routers.sql import CONTACT_DAYS

TITLE_QUIET = "Your week: all quiet at your {routers}"
TITLE = "Your week: {alerts} at your {routers}{sightings}"
RULES = {"current": "current and loaded", "behind": "an earlier version loaded",
         "failed": "the last load failed", "unreported": "the router does not report loading",
         "none": "none generated yet"}
OFF = ("You get this report every week. To stop it, ask your provider or turn it off in "
       "your account.")


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


def title(report: dict) -> str:
    totals = report["totals"]
    routers = "router" if totals["routers"] == 1 else f"{totals['routers']:,} routers"
    if report["all_quiet"]:
        return TITLE_QUIET.format(routers=routers)
    sightings = (f", {_plural(totals['sightings'], 'threat sighting')}"
                 if totals["sightings"] else "")
    return TITLE.format(alerts=_plural(totals["alerts"], "IDS alert"), routers=routers,
                        sightings=sightings)


def _local(moment: str, zone: str) -> str:
    return datetime.fromisoformat(moment).astimezone(ZoneInfo(zone)).strftime("%a %d %b %H:%M")


def _router_lines(week: dict, zone: str) -> list[str]:
    alerts = week["alerts"]
    lines = [f"Router {week['mac']}"]
    if week["quiet"]:
        since = (f"since {_local(week['last_contact'], zone)}" if week["last_contact"]
                 else f"in {CONTACT_DAYS} days or more")
        lines.append(f"  Gone quiet: no contact {since}. Check that it is on and online.")
    if alerts["total"]:
        lines.append(f"  IDS alerts: {alerts['total']:,} (high {alerts['high']:,}, medium "
                     f"{alerts['medium']:,}, low {alerts['low']:,}"
                     + (f", other {alerts['other']:,})" if alerts["other"] else ")"))
        lines.append("  Most alerts with: " + ", ".join(
            f"{entry['address']} ({entry['alerts']:,})" for entry in week["top_remote"]))
        lines += ["  Signature " + f"{entry['sid']}"
                  + (f" {entry['name']}" if entry["name"] else "") + f": {entry['alerts']:,}"
                  for entry in week["top_signatures"]]
    else:
        lines.append("  IDS alerts: none")
    sightings = week["sightings"]
    if sightings["count"]:
        lines.append(f"  Threat sightings: {sightings['count']:,}")
        lines += [f"  - {s['indicator']} ({s['kind']}), listed by {s['source']}, last seen "
                  f"{_local(s['last_seen'], zone)}" for s in sightings["listed"]]
        if sightings["count"] > len(sightings["listed"]):
            lines.append(f"  ... and {sightings['count'] - len(sightings['listed']):,} more")
    blocked = week["blocked"]
    if blocked is not None:  # (None: its agent sends no enforcement report)
        lines.append(f"  Blocked by its firewall: {_plural(blocked['packets'], 'packet')}"
                     + (f" (its own list {blocked['firewall']:,}, the fleet's "
                        f"{blocked['fleet']:,}, threat intelligence {blocked['intel']:,})"
                        if blocked["packets"] else ""))
    lines.append(f"  Rules: {RULES[week['rules']['state']]}")
    if not week["quiet"]:
        lines.append(f"  Last contact: {_local(week['last_contact'], zone)}")
    return lines


def message(report: dict) -> str:
    zone, period, totals = report["period"]["zone"], report["period"], report["totals"]
    lines = [f"Your routers' week, {_local(period['start'], zone)} to "
             f"{_local(period['end'], zone)} ({zone}).", ""]
    if report["all_quiet"]:
        lines += ["All quiet: no IDS alert and no threat sighting at your "
                  + ("router." if totals["routers"] == 1 else "routers."), ""]
    for week in report["routers"]:
        lines += _router_lines(week, zone) + [""]
    if report["routers_not_listed"]:
        lines += [f"... and {_plural(report['routers_not_listed'], 'more router')}. In all: "
                  f"{_plural(totals['alerts'], 'IDS alert')}, "
                  f"{_plural(totals['sightings'], 'threat sighting')}, "
                  f"{_plural(totals['quiet_routers'], 'router')} gone quiet, "
                  f"{_plural(totals['rules_not_current'], 'router')} without current rules.",
                  ""]
    lines.append(OFF)
    return "\n".join(lines)
