"""A router's enforcement report stored (issue 82): what its firewall sets dropped, per
list, added to its day (the service's UTC day when the report arrives, so no router names a
day of its own).

Only what the router holds is stored as fact: an entry it was never sent (not in its own
firewall payload, the fleet's list, or a current threat intelligence document; no address;
named twice; nothing matched) is counted as ignored, not stored; an entry counts no more
than its list in the report. A router-day keeps at most ENFORCEMENT_ENTRIES_PER_ROUTER_DAY
entries over its lists (those already kept are always added to); a list's totals are always
added. No count is kept past a 10 Gbit/s line's day (MAX_BYTES, MAX_PACKETS: a router
cannot claim more than its line could carry, and a sum never overflows). One router's
reports are stored one at a time (an advisory lock), so two at once cannot both take the
day's last room."""

from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass

import orjson

from engine.addresses import network_of
from server.db.pool import Database, execute
from server.enforcement import sql
from server.enforcement.config import EnforcementConfig
from server.enforcement.report import Hit, ListReport
from server.generation.rules_sql import read_payload
from server.intel.capacity import document_names

MAX_BYTES = 10 ** 10 // 8 * 86_400      # a day at 10 Gbit/s
MAX_PACKETS = MAX_BYTES // 64            # of the smallest Ethernet frames
MAX_ALERTS = 10 ** 9


@dataclass(frozen=True)
class Stored:
    list: str
    entries: int    # stored (or added to)
    ignored: int    # never sent to this router
    over_budget: int  # past the router-day's entries

    def as_json(self) -> dict:
        return {"entries": self.entries, "ignored": self.ignored,
                "over_budget": self.over_budget}


async def store_report(db: Database, config: EnforcementConfig, mac: str,
                       lists: tuple[ListReport, ...], address: str | None) -> list[Stored]:
    """Add `lists` to the router's day; `address`: where the report came from (its
    network is what the router counts for in the fleet's figures)."""
    network = network_of(address) if address else None  # the day keeps its first
    given = [(report.name, hit) for report in lists for hit in report.hits
             if hit.entry is not None]
    own = await _own_list(db, mac) if any(name == "firewall" for name, _ in given) else []
    async with db.transaction() as cur:
        await execute(cur, sql.LOCK_ROUTER, {"lock_class": sql.LOCK_CLASS, "mac": mac})
        day = await sql.today(cur)
        sent = await _sent(cur, config, mac, given, own)
        await execute(cur, sql.HELD, {"mac": mac, "day": day})
        held = {tuple(row) for row in await cur.fetchall()}
        room = max(0, config.entries_per_router_day - len(held))
        kept, outcome = _admitted(lists, sent, held, room)
        # An entry counts no more than its list in the report, the list no more than a day.
        totals = {report.name: (min(report.packets, MAX_PACKETS), min(report.bytes, MAX_BYTES))
                  for report in lists}
        await execute(cur, sql.ADD_DAYS, {
            "mac": mac, "day": day, "network": network,
            "lists": [report.name for report in lists],
            "packets": [totals[report.name][0] for report in lists],
            "bytes": [totals[report.name][1] for report in lists],
            "alerts": [min(report.alerts, MAX_ALERTS) for report in lists], **_bounds()})
        if kept:
            await execute(cur, sql.ADD_HITS, {
                "mac": mac, "day": day, "lists": [name for name, _ in kept],
                "entries": [hit.entry for _, hit in kept],
                "packets": [min(hit.packets, totals[name][0]) for name, hit in kept],
                "bytes": [min(hit.bytes, totals[name][1]) for name, hit in kept],
                **_bounds()})
    return outcome


def _admitted(lists: tuple[ListReport, ...], sent: set, held: set, room: int
              ) -> tuple[list[tuple[str, Hit]], list[Stored]]:
    """The hits stored (those sent: already held, or new while the day has room, each
    list's most matched first, as the agent sends them), and each list's outcome."""
    kept, outcome = [], []
    for report in lists:
        ignored = over = 0
        for hit in report.hits:
            key = (report.name, hit.entry)
            if key not in sent or not (hit.packets or hit.bytes):  # (nothing matched)
                ignored += 1
            elif key in held or room > 0:
                room -= key not in held
                kept.append((report.name, hit))
            else:
                over += 1
        outcome.append(Stored(report.name, len(report.hits) - ignored - over, ignored, over))
    return kept, outcome


async def _own_list(db: Database, mac: str) -> list[str]:
    """The addresses of the router's own firewall payload as it was last stored."""
    found = await read_payload(db, mac, "firewall", frozenset())
    packed = found[1] if found is not None else None
    if packed is None:
        return []
    return await asyncio.to_thread(_addresses, packed)  # (a large list: off the event loop)


def _addresses(packed: bytes) -> list[str]:
    return [entry["address"] for entry in orjson.loads(gzip.decompress(packed))["entries"]]


def _bounds() -> dict:
    return {"max_packets": MAX_PACKETS, "max_bytes": MAX_BYTES, "max_alerts": MAX_ALERTS}


async def _sent(cur, config: EnforcementConfig, mac: str, given: list, own: list[str]
                ) -> set[tuple[str, str]]:
    if not given:
        return set()
    await execute(cur, sql.SENT, {"mac": mac, "own": own, "lists": [name for name, _ in given],
                                  "entries": [hit.entry for _, hit in given],
                                  "documents": document_names(config.intel_max_entries)})
    return {tuple(row) for row in await cur.fetchall()}
