"""Threat intelligence at fleet scale (issue 60): a 100,000-indicator feed retro-hunted over a
hunt index built as bench/hunt.py builds it (the service's own postings statement and
packing job), the shared document's size and build time at 100,000 entries, and what a
router downloads when 1 % of the feed changes.

    python -m bench.intel [--routers 10000] [--days 30] [--distinct-days 3]
                              [--processes 4]

The feed: 100,000 values, domains and addresses, half of them from the index's own pools
(so some every router saw, most a few routers, many none), half never posted. It is taken
through the service's path (server/intel/feeds.py import_file: parsing, the swap in one
transaction), then retro-hunted (server/intel/retro.py retro_hunt: the blocks read once,
prevalence checked, sightings recorded; --processes: INTEL_RETRO_HUNT_PROCESSES, at most
the machine's cores). The document is built as a server process builds
it (the delivery statement, engine/intel.py, gzip once); the reference, in the same run, is
the same values written one a line and gzip-compressed. The daily change is 1 % of the
values replaced in one new version; the delta is what `GET /rules/intel?delta=1` answers.
The minute's match is timed reading only what 100 routers posted since its last run,
against its first run in the same database, which reads every current indicator (as the
release before read them every minute).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import sys
import time
from datetime import datetime, timedelta, timezone

import numpy as np

from engine.fleet import times_written
from engine.intel import changes, delta_document, intel_document
from bench.hunt import COPY_DAYS, _macs, _value, write_day
from server.intel import sql as intel_db
from server.db.pool import Database
from server.intel.feeds import import_file
from server.intel.config import IntelConfig
from server.intel.retro import live_match, retro_hunt
from server.polling.shared_document import served_document
from server.hunt.packing import pack
from testkit.database import partitions_for_history, settings_for, throwaway_database

FEED_VALUES = 100_000


def feed_lines(seed: int, changed: int = 0) -> list[str]:
    """The feed: half the index's pool values (shown form), half values nobody posted; the
    last `changed` replaced by new ones."""
    lines = []
    for n in range(FEED_VALUES):
        index = n // 2
        if n % 2:
            lines.append(f"never{seed}-{n}.example.net")
        elif index % 5 == 0:
            lines.append(_value("i", index))
        else:
            lines.append(".".join(reversed(_value("d", index).split("."))))
    for n in range(changed):
        lines[-1 - n] = f"changed{n}.example.org"
    return lines


async def build_index(db: Database, routers: int, days: int, distinct: int) -> None:
    rng = np.random.default_rng(60)
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    macs = _macs(routers)
    # Registered before the index's days: old enough to count toward a value's prevalence.
    await db.execute("INSERT INTO routers (mac, registered_at) SELECT "
                     "unnest(%(macs)s::macaddr[]), %(then)s",
                     {"macs": macs, "then": today - timedelta(days=days + 1)})
    for back in range(1, distinct + 1):
        await write_day(db, macs, today - timedelta(days=back), rng)
        await pack(db, today)
    for back in range(distinct + 1, days + 1):
        source = today - timedelta(days=1 + (back - 1) % distinct)
        await db.execute(COPY_DAYS, {"to": today - timedelta(days=back), "from": source})


async def document(db: Database) -> tuple[dict, int, float]:
    """The shared document, its packed bytes and build seconds (statement, build, gzip)."""
    started = time.monotonic()
    rows = await intel_db.delivered(db, [], FEED_VALUES, timedelta(hours=72), True)
    built = intel_document([times_written({"kind": k, "value": v, "expires_at": e})
                            for k, v, e in rows])
    served = served_document(built)
    return built, len(served.packed), time.monotonic() - started


NEW_ROUTERS = 100  # routers whose uploads the minute's match finds new, out of the fleet


async def minute_match(db: Database, config: IntelConfig, routers: int) -> dict:
    """The minute's match (server/intel/retro.py live_match) twice: its first run reads
    every current indicator, as the release before read them every minute (the reference);
    the next reads those named by what NEW_ROUTERS routers posted since (a day of their
    uploads written today, seen now)."""
    started = time.monotonic()
    everything = await live_match(db, config, "bench")
    every_seconds = time.monotonic() - started
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    await write_day(db, _macs(routers)[:NEW_ROUTERS], today, np.random.default_rng(80))
    await db.execute("UPDATE hunt_postings SET last_seen = now() WHERE day = %s", (today,))
    started = time.monotonic()
    new = await live_match(db, config, "bench")
    return {"every_indicators": everything.indicators, "every_seconds": every_seconds,
            "new_indicators": new.indicators, "new_seconds": time.monotonic() - started}


async def run(location, workdir, routers: int, days: int, distinct: int,
              processes: int) -> dict:
    settings = settings_for(location, workdir, HUNT_RETENTION_DAYS=str(days + 1),
                            INTEL_MAX_ENTRIES=str(FEED_VALUES),
                            INTEL_RETRO_HUNT_PROCESSES=str(processes))
    db = await Database.open(location, 1, 2, 900)
    try:
        started = time.monotonic()
        await build_index(db, routers, days, distinct)
        index_seconds = time.monotonic() - started
        await intel_db.add_feed(db, "bench", None, "plain", None, 50, "bench")
        feed = (await intel_db.feeds(db, "bench"))[0]
        started = time.monotonic()
        taken = await import_file(db, feed, "\n".join(feed_lines(1)).encode(), "bench")
        import_seconds = time.monotonic() - started
        started = time.monotonic()
        hunted = await retro_hunt(db, IntelConfig.from_settings(settings), "bench")
        hunt_seconds = time.monotonic() - started
        minute = await minute_match(db, IntelConfig.from_settings(settings), routers)
        before, before_bytes, build_seconds = await document(db)
        values = "".join(f"{line}\n" for line in feed_lines(1)).encode()
        started = time.monotonic()
        reference = gzip.compress(values, 6)
        reference_seconds = time.monotonic() - started
        feed = (await intel_db.feeds(db, "bench"))[0]
        await import_file(db, feed, "\n".join(feed_lines(1, FEED_VALUES // 100)).encode(),
                          "bench")
        after, _, _ = await document(db)
        added, removed = changes(before, after)
        delta = served_document(delta_document("before", after, added, removed))
        return {"routers": routers, "days": days, "index_seconds": index_seconds,
                "indicators": taken.indicators, "import_seconds": import_seconds,
                "hunt_seconds": hunt_seconds, "hunted": vars(hunted), **minute,
                "document_bytes": before_bytes, "document_entries": before["entry_count"],
                "build_seconds": build_seconds, "reference_bytes": len(reference),
                "reference_seconds": reference_seconds, "delta_bytes": len(delta.packed),
                "delta_items": len(added) + len(removed)}
    finally:
        await db.close()


def report(r: dict) -> None:
    h = r["hunted"]
    print(f"index: {r['routers']:,} routers × {r['days']} days, built in "
          f"{r['index_seconds']:.0f} s")
    print(f"feed: {r['indicators']:,} indicators taken in {r['import_seconds']:.1f} s; "
          f"retro-hunt over {r['days']} days in {r['hunt_seconds']:.1f} s "
          f"({h['hunted']:,} hunted, {h['sightings']:,} sightings, {h['held']:,} held)")
    print(f"minute's match: {r['new_indicators']:,} indicators named by what "
          f"{NEW_ROUTERS} routers posted since the last run, {r['new_seconds']:.2f} s; "
          f"reading every current one ({r['every_indicators']:,}, as the release before did "
          f"each minute) {r['every_seconds']:.2f} s: "
          f"{r['new_seconds'] / r['every_seconds']:.3f}×")
    print(f"document: {r['document_entries']:,} entries, {r['document_bytes'] / 1e6:.2f} MB "
          f"gzip ({r['document_bytes'] / r['document_entries']:.1f} B an entry), built in "
          f"{r['build_seconds']:.2f} s; reference (the values one a line, gzip): "
          f"{r['reference_bytes'] / 1e6:.2f} MB in {r['reference_seconds']:.2f} s: size "
          f"{r['document_bytes'] / r['reference_bytes']:.2f}×, time "
          f"{r['build_seconds'] / r['reference_seconds']:.1f}×")
    print(f"1 % of the feed changed: delta {r['delta_bytes'] / 1e3:.1f} KB gzip "
          f"({r['delta_items']:,} lines added or removed) against the whole document's "
          f"{r['document_bytes'] / 1e3:.0f} KB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--distinct-days", type=int, default=3)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    with throwaway_database() as (location, workdir):
        partitions_for_history(location, args.days + 1)
        report(asyncio.run(run(location, workdir, args.routers, args.days,
                               min(args.distinct_days, args.days), args.processes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
