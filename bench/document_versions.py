"""The cost of numbering the threat intelligence document's versions in the database
(issue 82, server/polling/versions.py): recording a first version of ENTRIES entries, then
versions each changing 1 % (as much in as out), and reading the delta over all of them, with
the rows and bytes the item table holds after. The reference is the whole document's items
recorded once, in the same run: a change should cost well under it.

    python -m bench.document_versions [--entries 100000] [--versions 6]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from datetime import datetime, timezone

from server.db.pool import Database
from server.polling import versions
from testkit.database import throwaway_database

PLACE = "rb-intel-domains.lst"


async def _recorded(db: Database, etag: str, held: set) -> float:
    began = time.perf_counter()
    await versions.record(db, "intel", etag, held, len(held), datetime.now(timezone.utc))
    return time.perf_counter() - began


async def _run(location, entries: int, count: int) -> None:
    db = await Database.open(location, 0, 4, 60)
    try:
        held = {(PLACE, f"value-{n:08d}") for n in range(entries)}
        whole = await _recorded(db, "v1", held)
        changed = max(1, entries // 100)
        times = []
        for version in range(2, count + 2):
            gone = set(random.Random(version).sample(sorted(held), changed))
            held = (held - gone) | {(PLACE, f"new-{version}-{n}") for n in range(changed)}
            times.append(await _recorded(db, f"v{version}", held))
        began = time.perf_counter()
        added, removed = await versions.changes(db, "intel", 1, count + 1)
        read = time.perf_counter() - began
        rows, size = await db.fetchrow("SELECT count(*), pg_total_relation_size("
                                       "'document_items') FROM document_items")
    finally:
        await db.close()
    print(f"a first version of {entries:,} entries recorded in {whole:.2f} s (the reference); "
          f"each 1 % change ({changed:,} in, {changed:,} out) in {min(times):.2f}-"
          f"{max(times):.2f} s: {max(times) / whole:.2f}× the reference at most")
    print(f"the delta over {count} versions ({len(added):,} added, {len(removed):,} removed) "
          f"read in {read * 1000:.0f} ms; the item table: {rows:,} rows, {size / 1e6:.1f} MB "
          f"({size / rows:.0f} bytes a row)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=6)
    args = parser.parse_args()
    with throwaway_database() as (location, _):
        asyncio.run(_run(location, args.entries, args.versions))


if __name__ == "__main__":
    main()
