"""`router-backend status [--json]`: the fleet at a glance. Whether the service answers
where it listens (a stopped service's database still reads as healthy); routers registered, seen in the
last day, silent for more than a week; routers whose applied ETags lag the current payloads
or that reported a failure; the generation queue (claimed, due, overdue by more than an
hour, failing, with their last errors); the ruleset (version, age, the last preprocess run
and its outcome); telemetry records accepted and rejected in the last hour; notifications
failed or pending; the hunt index's packed days and the routers past their daily budget of
postings."""

from __future__ import annotations

import argparse
import asyncio
import urllib.error
import urllib.request
from datetime import datetime

import orjson

from ops.command import Command, run_command
from server.db.pool import Database
from server.settings import Settings
from server.status import fleet_status
from server.text import one_line
from server.timestamps import iso_utc

PROG = "router-backend status"
HEALTH_TIMEOUT_SECONDS = 2.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON document")


def render(status: dict) -> str:
    routers, applied, queue = status["routers"], status["applied"], status["generation_queue"]
    ruleset, last = status["ruleset"], status["last_preprocess"]
    lines = [service_line(status["service"])] if "service" in status else []
    lines += [
        f"routers        {routers['registered']} registered, {routers['seen_last_day']} seen "
        f"in the last day, {routers['silent_over_a_week']} silent for more than a week"
        + (f"; {routers['not_unicast']} with a MAC that is not unicast (registered before "
           f"such MACs were refused): {', '.join(routers['not_unicast_listed'])}"
           if routers["not_unicast"] else ""),
        f"applied        {applied['reporting']} reporting, {applied['behind_current_payloads']} "
        f"behind the current payloads, {applied['failed_to_load']} failed to load"]
    lines += [f"                 {f['mac']} at {iso_utc(f['reported_at'])}: "
              f"{one_line(f['detail'] or '')}" for f in applied["failures"]]
    lines.append(f"queue          {queue['claimed']} claimed, {queue['due']} due, "
                 f"{queue['overdue']} overdue (due for over an hour), {queue['failing']} failing")
    lines += [f"                 {f['mac']}, {f['attempts']} attempts: "
              f"{one_line(f['last_error'] or '')}" for f in queue["failures"]]
    if ruleset is None and last is not None and last["status"] == "succeeded":
        # The ruleset's files are in RULE_DATA_DIR, not in the database: a restore into a new
        # DATA_DIR brings the record of the run, not what it published.
        lines.append("ruleset        none in this host's RULE_DATA_DIR, although the database "
                     "records a successful preprocess run (a restore brings the database, not "
                     "the ruleset's files): run `rulepreprocess` or wait for the job")
    elif ruleset is None:
        lines.append("ruleset        none published yet")
    else:
        lines.append(f"ruleset        {ruleset['version']}, published "
                     f"{iso_utc(ruleset['published_at'])} ({ruleset['age_hours']} h ago)")
    if last is not None:
        outcome = last["status"] + (f": {one_line(last['error'])}" if last["error"] else "")
        lines.append(f"               last preprocess run {iso_utc(last['started_at'])}, "
                     f"{outcome}")
    telemetry = status["telemetry_last_hour"]
    lines.append("telemetry      last hour: " + ", ".join(
        f"{kind} {counts['accepted']} accepted, {counts['rejected']} rejected"
        for kind, counts in telemetry.items()))
    notifications = status["notifications"]
    lines.append(f"notifications  {notifications['failed']} failed, "
                 f"{notifications['pending']} pending")
    lines += hunt_lines(status["hunt_index"])
    match = status["intel_match"]
    lines.append(f"intel match    last hour: {match['runs']} "
                 f"run{'' if match['runs'] == 1 else 's'}, slowest "
                 f"{match['slowest_seconds']} s, {match['longer_than_interval']} longer than "
                 f"its interval ({match['interval_seconds']:.0f} s)")
    return "\n".join(lines)


def hunt_lines(hunt: dict) -> list[str]:
    per = (f", {hunt['packed_bytes'] / hunt['packed_postings']:.1f} bytes a posting"
           if hunt["packed_postings"] else "")
    last = f", the last {hunt['last_packed_day']:%Y-%m-%d}" if hunt["last_packed_day"] else ""
    lines = [f"hunt index     {hunt['packed_days']} days packed ({hunt['packed_postings']} "
             f"postings in {hunt['packed_bytes']} bytes{per}{last}); "
             f"{hunt['over_budget_routers']} routers past HUNT_POSTINGS_PER_ROUTER_DAY since "
             f"yesterday, {hunt['unindexed_records']} records not indexed; "
             f"{hunt['pending_uploads']} uploads waiting for the indexer"
             + (f" (the oldest {hunt['oldest_pending_seconds']:.0f} s)"
                if hunt["pending_uploads"] else "")]
    lines += [f"                 {r['mac']} on {r['day']:%Y-%m-%d}: {r['postings']} posted, "
              f"{r['unindexed']} not indexed" for r in hunt["over_budget"]]
    return lines


PROBE_MAC = "02:00:00:00:00:00"  # locally administered: no router's


def service_answer(settings: Settings) -> dict:
    """Whether the service answers GET /health where it listens (LISTEN_HOST:LISTEN_PORT, the
    running service's own when it recorded them; an all-addresses host asked on loopback):
    the database this command reads says nothing of whether anybody serves it."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(settings.listen_host,
                                                                      settings.listen_host)
    url = f"http://{f'[{host}]' if ':' in host else host}:{settings.listen_port}/health"
    # The probe's X-ID: /health checks the header's form only (it registers nothing); without
    # one the probe was answered 401, and `status --json` said so.
    probe = urllib.request.Request(url, headers={"X-ID": PROBE_MAC})
    try:
        with urllib.request.urlopen(probe, timeout=HEALTH_TIMEOUT_SECONDS) as answer:
            return {"url": url, "answering": True, "status": answer.status}
    except urllib.error.HTTPError as error:  # 503: it runs, its database is away
        return {"url": url, "answering": True, "status": error.code}
    except (OSError, ValueError) as error:
        return {"url": url, "answering": False, "error": str(getattr(error, "reason", error))}


def service_line(service: dict) -> str:
    if service["answering"]:
        away = " (HTTP 503: its database is away)" if service["status"] == 503 else ""
        return f"service        answering at {service['url']}{away}"
    return (f"service        NOT RUNNING: nothing answers at {service['url']} "
            f"({service['error']}); what follows is what the database holds")


async def _run(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    status = {"service": await asyncio.to_thread(service_answer, settings),
              **await fleet_status(db, settings)}
    if args.json:
        print(orjson.dumps(status, default=_moment,
                           option=orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_DATETIME).decode())
    else:
        print(render(status))
    return 0


def _moment(value):
    if isinstance(value, datetime):
        return iso_utc(value)
    raise TypeError(type(value).__name__)


def status(settings: Settings, args: argparse.Namespace) -> int:
    return run_command(PROG, lambda settings, db: _run(args, settings, db), settings=settings)


COMMAND = Command("status", "the fleet at a glance: routers, applied rules, the generation "
                  "queue, the ruleset, telemetry, notifications",
                  add_arguments, status)
