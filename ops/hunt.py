"""`router-backend hunt`: which routers' records carried an address, a domain (or a name
under it), a TLS fingerprint, a signature or a file, over the last --days days, from the
hunt index (server/hunt/); `hunt --log` lists the hunts made. Every hunt is recorded with the
operator's login name (docs/security.md)."""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

import orjson

from ops.command import Command, UsageError, operator, run_command
from server.process.exits import EXIT_USAGE
from server.db.pool import Database
from server.telemetry.indicators import (Indicator, IndicatorError, from_line, indicator,
                                         parsed)
from server.hunt.config import HuntConfig
from server.hunt.indexer import HUNT_WAIT_SECONDS, index_pending
from server.hunt.search import (LOG_SHOWN, MATCHES_SHOWN, Hunt, count_text, day_asked,
                                hunt_indexed, hunt_log)
from server.settings import Settings
from server.hunt.packing import pack

PROG = "router-backend hunt"
MAX_INDICATORS = 100_000  # a hunt's, read in one pass of the days asked
OPTIONS = (("ip", "ADDR", "an IPv4 or IPv6 address (source or destination of any record)"),
           ("network", "CIDR", "every address of a network of at most 65,536 (a /16, a /112)"),
           ("domain", "NAME", "a DNS name, TLS SNI or HTTP host, and every name under it"),
           ("ja3", "MD5", "a JA3 or JA3S hash"), ("ja4", "FP", "a JA4 fingerprint"),
           ("sid", "N", "an alert's signature id"), ("sha256", "HEX", "a file's SHA-256"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("indicators", nargs="*", metavar="INDICATOR",
                        help="KIND:VALUE (KIND one of ip, network, domain, ja3, ja4, sid, "
                             "sha256), or a bare address, network, domain name or SHA-256; "
                             "or the one word 'compact': index the uploads pending and pack "
                             "every day before today into the index's compressed blocks now, "
                             "as the indexer and the hunt-compact job do on their own "
                             "(HUNT_INDEX_SECONDS, HUNT_COMPACT_CRON_SCHEDULE); hunts answer "
                             "the same")
    for kind, metavar, text in OPTIONS:
        parser.add_argument(f"--{kind}", metavar=metavar, action="append", default=[],
                            help=f"{text} (repeatable)")
    parser.add_argument("--file", type=Path, action="append", default=[],
                        help="indicators, one a line, written as INDICATOR (KIND VALUE "
                             "too); # starts a comment")
    parser.add_argument("--days", type=int, default=30,
                        help="days back, by when records were received (default 30, at most "
                             "HUNT_RETENTION_DAYS)")
    parser.add_argument("--until", type=_day, metavar="YYYY-MM-DD",
                        help="the last day searched, by when records were received (default "
                             "and at most today)")
    parser.add_argument("--limit", type=int,
                        help=f"matches shown at most (default {MATCHES_SHOWN}); the count is "
                             "whole up to the hunt's bound")
    parser.add_argument("--offset", type=int, default=0,
                        help="matches left out before the ones shown: the next page is "
                             "--offset of the last plus its --limit")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--log", action="store_true",
                        help="list the hunts and drill-downs made, newest first (who, when, "
                             "what, how many matches): --limit of them (default "
                             f"{LOG_SHOWN}), after --skip")
    parser.add_argument("--skip", type=int, default=0, help="with --log: newest left out")


def _day(text: str) -> date:
    """--until's day (argparse says what is wrong when it is not one)."""
    try:
        return day_asked(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def indicators_of(args: argparse.Namespace) -> list[Indicator]:
    """Every indicator the arguments name; UsageError for a malformed one."""
    found = []
    try:
        found += [parsed(text) for text in args.indicators]
        for kind, _, _ in OPTIONS:
            found += [indicator(kind, value) for value in getattr(args, kind)]
        for path in args.file:
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except OSError as error:
                raise UsageError(f"--file {path}: {error.strerror}") from None
            except UnicodeDecodeError as error:
                raise UsageError(f"--file {path}: not UTF-8 text (byte {error.start})") \
                    from None
            before = len(found)
            for number, line in enumerate(lines, 1):
                try:
                    if (one := from_line(line)) is not None:
                        found.append(one)
                except IndicatorError as error:
                    raise UsageError(f"--file {path}:{number}: {error}") from None
            if len(found) == before:
                raise UsageError(f"--file {path} names no indicator ("
                                 + ("it is empty" if not lines else "only blank lines and "
                                    "comments") + "): one a line, KIND:VALUE or a bare value")
    except IndicatorError as error:
        raise UsageError(str(error)) from None
    found = list(dict.fromkeys(found))
    values = sum(len(i.postings()) for i in found)
    if values > MAX_INDICATORS:
        raise UsageError(f"{values} indicators (a network counts each address): at most "
                         f"{MAX_INDICATORS:,} a hunt (split the file)")
    return found


def table(answer: dict) -> str:
    searched = answer["searched"]
    first = answer["offset"] + 1
    if not answer["shown"] and answer["offset"]:
        shown = f", none shown from --offset {answer['offset']}: past the last"
    else:
        shown = (f", {first} to {first + answer['shown'] - 1} shown (earliest sighting first, "
                 "each indicator in turn)" if answer["shown"] < answer["match_count"] else "")
    more = (f"; more with --offset {answer['offset'] + answer['shown']}" if answer["more"]
            else "")
    lines = [f"{count_text(answer)} match(es) in the records received from "
             f"{searched['from']} to {searched['to']}{shown}{more}",
             *(f"note: {note}" for note in answer["notes"]),
             "mac\tkind\tindicator\tfirst_seen\tlast_seen\trecords\tdays\trecords_expired\t"
             "networks"]
    for match in answer["matches"]:
        lines.append(f"{match['mac']}\t{match['kind']}\t{match['indicator']}\t"
                     f"{match['first_seen']}\t{match['last_seen']}\t{match['records']}\t"
                     f"{len(match['days'])}\t{'yes' if match['records_expired'] else 'no'}\t"
                     f"{','.join(match['networks']) or '-'}")
    return "\n".join(lines)


async def _run(settings: Settings, args: argparse.Namespace, db: Database,
               indicators: list[Indicator]) -> int:
    if args.log:
        entries = await hunt_log(db, args.limit or LOG_SHOWN, args.skip)
        if args.json:
            print(orjson.dumps(entries, option=orjson.OPT_INDENT_2).decode())
        else:
            print("at\tasked_by\tvia\tfrom\tto\tmatches\trouter\tindicators")
            for e in entries:
                what = ", ".join(f"{i['kind']} {i['value']}" for i in e["indicators"])
                matches = f"{'' if e['matches_exact'] else '>='}{e['matches']}"
                print(f"{e['at']}\t{e['asked_by']}\t{e['via']}\t{e['from']}\t{e['to']}\t"
                      f"{matches}\t{e['router'] or '-'}\t{what}")
        return 0
    hunt = Hunt(tuple(indicators), args.days, args.limit or MATCHES_SHOWN, args.offset,
                until=args.until)
    answer = await hunt_indexed(db, HuntConfig.from_settings(settings), hunt, operator(),
                                "command")
    print(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() if args.json
          else table(answer))
    return 0


async def _compact(settings: Settings, db: Database) -> int:
    config = HuntConfig.from_settings(settings)
    indexed = await index_pending(db, config.budget, HUNT_WAIT_SECONDS, config.lanes)
    if indexed.uploads:
        print(f"indexed {indexed.uploads} upload(s) pending: {indexed.records} records, "
              f"{indexed.postings} values")
    if indexed.left:
        print(f"{indexed.left} upload(s) still pending: the indexer is behind", file=sys.stderr)
    done = (await pack(db)).as_detail()
    if not done["days"]:
        print("nothing to pack: no day before today has postings left unpacked (today's "
              "are packed once the day has ended)")
    else:
        print(f"packed {len(done['days'])} day(s), {done['days'][0]} to {done['days'][-1]}: "
              f"{done['postings']} postings in {done['bytes']} bytes "
              f"({done['bytes_per_posting']} a posting)")
    return 0


def hunt(settings: Settings, args: argparse.Namespace) -> int:
    if args.indicators == ["compact"]:
        return run_command(PROG, _compact, settings=settings)
    try:
        indicators = indicators_of(args)
        if not args.log and not indicators:
            raise UsageError("name at least one indicator (KIND:VALUE, --ip, --network, "
                             "--domain, --ja3, --ja4, --sid, --sha256 or --file)")
        if not 1 <= args.days <= settings.hunt_retention_days:
            raise UsageError(f"--days is 1 to {settings.hunt_retention_days} (the index's "
                             "HUNT_RETENTION_DAYS)")
        if args.limit is not None and not 1 <= args.limit <= 100_000 or args.skip < 0 \
                or not 0 <= args.offset <= 1_000_000:
            raise UsageError("--limit is 1 to 100000, --skip 0 or more, --offset 0 to 1000000")
    except UsageError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return EXIT_USAGE
    return run_command(PROG, lambda settings, db: _run(settings, args, db, indicators),
                       settings=settings)


COMMAND = Command("hunt", "which routers saw an address, a domain, a TLS fingerprint, a "
                  "signature or a file, and since when (recorded)",
                  add_arguments, hunt)
