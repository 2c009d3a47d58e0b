"""`router-backend intel`: threat feeds (add, list, remove, fetch now, import a file), the
operators' decisions on one value (suppress, release a held one), and the sightings
(docs/intel.md). Every change is recorded in `intel_log` with the operator's login name."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import orjson

from ops.command import Command, CommandError, UsageError, mac_argument, operator, sub_command
from server.feedback import sql as marks_db
from server.intel import sql as intel_db
from server.intel.config import IntelConfig
from server.db.pool import Database
from server.intel.feeds import import_file
from server.intel.formats import FORMATS, KINDS
from server.intel.jobs import fetch_feeds, judge_and_tell
from server.jobs.cron import run_job
from server.intel.listing import sightings as listed_sightings
from engine.intel import shown
from server.settings import Settings
from server.intel.values import ValueInvalid, written_value
from server.timestamps import iso_utc

PROG = "router-backend intel"
NAME_HELP = "a name of lower-case letters, digits, '.', '_', '-' (at most 63)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a feed, fetched by the intel-fetch job")
    add.set_defaults(act=_add)
    add.add_argument("name", help=NAME_HELP)
    add.add_argument("url", nargs="?", help="http(s) URL (none: filled by `intel import`)")
    add.add_argument("--format", required=True, choices=FORMATS)
    add.add_argument("--kind", choices=KINDS, help="plain: every line's kind (default: "
                     "inferred per line)")
    add.add_argument("--confidence", type=int, default=50,
                     help="0-100, for indicators the feed gives none (default 50)")
    actions.add_parser("list", help="the feeds: last success, last error, lines refused"
                       ).set_defaults(act=_list)
    remove = actions.add_parser("remove", help="remove a feed and its indicators")
    remove.add_argument("name")
    remove.set_defaults(act=_remove)
    shrink = actions.add_parser("may-shrink", help="whether a fetched version that drops "
                                "most of the feed's previous one is taken (default: no)")
    shrink.add_argument("name")
    shrink.add_argument("answer", choices=("yes", "no"))
    shrink.set_defaults(act=_may_shrink)
    fetch = actions.add_parser("fetch", help="fetch now (every feed with a URL, or one), "
                               "then retro-hunt and tell owners, as the job does")
    fetch.add_argument("name", nargs="?")
    fetch.set_defaults(act=_fetch)
    imported = actions.add_parser("import", help="take a feed's version from a file")
    imported.add_argument("file", type=Path)
    imported.add_argument("--feed", required=True, help="the feed (added before, or added "
                          "now without a URL)")
    imported.add_argument("--format", choices=FORMATS, help="when adding the feed")
    imported.add_argument("--kind", choices=KINDS)
    imported.set_defaults(act=_import)
    for verb, text in (("suppress", "never deliver nor sight a value, whatever feed names "
                        "it"), ("release", "deliver a value held for its prevalence")):
        decided = actions.add_parser(verb, help=text)
        decided.add_argument("value", help="KIND:VALUE, or a bare address, domain or hash, as "
                             "`hunt` takes it (KIND one of " + ", ".join(KINDS) + ")")
        decided.add_argument("--note", required=True, help="why (kept in the record)")
        decided.set_defaults(act=_decide)
    actions.add_parser("decisions", help="values suppressed, released or held"
                       ).set_defaults(act=_decisions)
    seen = actions.add_parser("sightings", help="which routers saw a current or past "
                              "indicator")
    seen.add_argument("--mac")
    seen.add_argument("--json", action="store_true", help="one JSON object")
    seen.set_defaults(act=_sightings)


def _value(text: str) -> tuple[str, str]:
    try:
        return written_value(text)
    except ValueInvalid as error:
        raise UsageError(str(error)) from None


async def _feed(db: Database, name: str) -> intel_db.Feed:
    found = await intel_db.feeds(db, name)
    if not found:
        raise CommandError(f"no feed named {name!r} (`{PROG} list`)")
    return found[0]


def _counted(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason}: {n}" for reason, n in sorted(counts.items()))


def _print_feeds(feeds: list[intel_db.Feed], withheld: dict[str, dict[str, int]],
                 sighted: dict[str, int], marked: dict[str, int]) -> None:
    """Each feed, and beside what it gives (its routers' sightings) what it costs: the
    sightings their owners marked not an attack."""
    print("feed\tformat\tindicators\tlines\trefused\twithheld\tlast_success\tlast_error\t"
          "url\tsightings\tnot_an_attack")
    for feed in feeds:
        refusals, kept_back = _counted(feed.refusals), withheld.get(feed.name, {})
        print(f"{feed.name}\t{feed.format}\t{feed.indicators}\t{feed.lines}\t{feed.refused}"
              f"{f' ({refusals})' if refusals else ''}\t{sum(kept_back.values())}"
              f"{f' ({_counted(kept_back)})' if kept_back else ''}\t"
              f"{iso_utc(feed.succeeded_at) or 'never'}\t{feed.error or ''}\t"
              f"{feed.url or '(imported)'}\t{sighted.get(feed.name, 0)}\t"
              f"{marked.get(feed.name, 0)}")


def _sightings_json(rows: list[dict]) -> dict:
    return {"sightings": [
        {"indicator": s["indicator"], "kind": s["kind"], "source": s["source"],
         "mac": s["mac"], "first_seen": iso_utc(s["first_seen"]),
         "last_seen": iso_utc(s["last_seen"]), "days": s["days"], "records": s["records"],
         "owner_told": iso_utc(s["told_at"]), "closed": s["closed"]} for s in rows]}


async def _add(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    if not 0 <= args.confidence <= 100:
        raise UsageError("--confidence is 0 to 100")
    if args.url and not args.url.startswith(("http://", "https://")):
        raise UsageError(f"{args.url[:80]!r} is not an http(s) URL")
    if not await intel_db.add_feed(db, args.name, args.url, args.format, args.kind,
                                   args.confidence, operator()):
        raise CommandError(f"a feed named {args.name!r} exists")
    print(f"feed {args.name} added; fetched by the intel-fetch job "
          f"({settings.intel_fetch_cron_schedule}) or now by `{PROG} fetch {args.name}`"
          if args.url else f"feed {args.name} added; fill it with `{PROG} import FILE "
          f"--feed {args.name}`")
    return 0


async def _list(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    exempt = list(IntelConfig.from_settings(settings).service_networks)
    _print_feeds(await intel_db.feeds(db), await intel_db.withheld_counts(db, exempt),
                 await intel_db.sightings_by_feed(db), await marks_db.by_feed(db))
    return 0


async def _may_shrink(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    if not await intel_db.set_may_shrink(db, args.name, args.answer == "yes", operator()):
        raise CommandError(f"no feed named {args.name!r}")
    print(f"feed {args.name}: a fetched version dropping most of the previous one is "
          + ("taken" if args.answer == "yes" else "refused, the previous one kept"))
    return 0


async def _remove(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    if not await intel_db.remove_feed(db, args.name, operator()):
        raise CommandError(f"no feed named {args.name!r}")
    print(f"feed {args.name} removed (its sightings are kept)")
    return 0


async def _fetch(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    if args.name:
        await _feed(db, args.name)
    actor = operator()
    outcome = await run_job(db, "intel-fetch",  # never beside the job's own run
                            lambda: fetch_feeds(db, IntelConfig.from_settings(settings),
                                                args.name, actor))
    if outcome.status != "succeeded":
        raise CommandError(outcome.error or "an intel fetch is running in another "
                           "process (the intel-fetch job): try again when it is done")
    done = outcome.detail
    for line in done["feeds"]:
        print(line)
    print(f"retro-hunt: {done['retro_hunt']['hunted']:,} indicators over "
          f"{settings.hunt_retention_days} days, {done['retro_hunt']['new_sightings']:,} "
          f"new sightings, {done['retro_hunt']['held']:,} held; owners told: "
          f"{done['notifications']:,} ({done['emailed']:,} emailed)")
    return 0 if not any(": kept the previous version" in line for line in done["feeds"]) \
        else 1


async def _decide(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    kind, value = _value(args.value)
    decision = {"suppress": "suppressed", "release": "released"}[args.action]
    await intel_db.decide(db, kind, value, decision, args.note, operator())
    print(f"{kind}:{shown(kind, value)} {decision}; every router's document follows at "
          "its next poll")
    return 0


async def _decisions(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    print("kind\tvalue\tdecision\trouters\tnote\tby\tat")
    for kind, value, decision, routers, note, by, at in await intel_db.decisions(db):
        print(f"{kind}\t{shown(kind, value)}\t{decision}\t{routers or ''}\t{note}\t{by}\t"
              f"{iso_utc(at)}")
    return 0


async def _sightings(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    mac = mac_argument(args.mac) if args.mac else None
    rows = await listed_sightings(db, mac)
    if args.json:
        print(orjson.dumps(_sightings_json(rows)).decode())
        return 0
    print("indicator\tkind\tsource\tmac\tfirst_seen\tlast_seen\tdays\trecords\towner")
    for s in rows:
        owner = (f"told {iso_utc(s['told_at'])}" if s["told_at"]
                 else f"closed: {s['closed']}" if s["closed"]
                 else "to tell" if s["owned"] else "no owner")
        print(f"{s['indicator']}\t{s['kind']}\t{s['source']}\t{s['mac']}\t"
              f"{iso_utc(s['first_seen'])}\t{iso_utc(s['last_seen'])}\t{s['days']}\t"
              f"{s['records']}\t{owner}")
    unowned = await intel_db.routers_without_owner(db)
    if unowned:
        print(f"{len(unowned)} router(s) with sightings and no owner to tell "
              f"(`router-backend subscriptions owner MAC --user ID --email ADDR`): "
              f"{', '.join(unowned[:20])}{' ...' if len(unowned) > 20 else ''}")
    return 0


async def _import(args: argparse.Namespace, settings: Settings, db: Database) -> int:
    actor = operator()
    try:
        size = args.file.stat().st_size
        if size > settings.intel_feed_max_bytes:
            raise CommandError(f"{args.file} is {size:,} bytes, more than "
                               f"INTEL_FEED_MAX_BYTES ({settings.intel_feed_max_bytes:,})")
        data = await asyncio.to_thread(args.file.read_bytes)
    except OSError as error:
        raise CommandError(f"cannot read {args.file}: {error.strerror}") from None
    found = await intel_db.feeds(db, args.feed)
    if not found:
        if not args.format:
            raise UsageError(f"no feed named {args.feed!r}: give --format to add it")
        await intel_db.add_feed(db, args.feed, None, args.format, args.kind, 50, actor)
        found = await intel_db.feeds(db, args.feed)
    taken = await import_file(db, found[0], data, actor)
    print(taken.line())
    if taken.outcome == "failed":
        return 1
    done = await judge_and_tell(db, IntelConfig.from_settings(settings), actor)
    hunted = done["retro_hunt"]
    print(f"retro-hunt: {hunted['hunted']:,} indicators, {hunted['new_sightings']:,} new "
          f"sightings, {hunted['held']:,} held; owners told: {done['notifications']:,}")
    return 0


COMMAND = Command("intel", "threat feeds delivered to every router and retro-hunted; their "
                  "sightings, told to the routers' owners", add_arguments, sub_command(PROG))
