"""Indicators matched against the hunt index: a new version's indicators over
HUNT_RETENTION_DAYS (the retro-hunt), and each minute the current indicators the index
gained postings of since the last minute, over the last two days (so an upload is sighted
within about a minute of its acknowledgement). Both
read the index as hunts do (server/hunt/sightings.py), in batches of BATCH indicators.

Each (router, indicator) found is one sighting (server/intel/sql.py record_sightings): a rerun
widens it, never adds one. A value more than INTEL_PREVALENCE_MAX of the fleet's counted
routers saw (and at least HELD_FLOOR), in the last 7 days or over the days hunted, is held
for an operator and gives no sighting: a feed's false positive would fire at every router
and tell every household at once. What is hunted: ip, domain (the
name and every name under it), ja3, ja4, sha256, and networks of at most
HUNTED_NETWORK_ADDRESSES (each address of them); larger networks and md5 are delivered to the
routers, not hunted (the index keeps no md5, and a /16 is 65,536 lookups)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from server.intel import sql as intel_db
from server.db.jobs import exclusive
from server.db.pool import Database
from server.hunt.indexer import HUNT_WAIT_SECONDS, index_pending
from server.hunt.recent import indexed_until, posted_since
from server.hunt.search import UNPACKED_READS
from server.hunt.sightings import Sightings, sightings
from server.hunt.tallies import Tallied, router_tallies
from server.intel.config import IntelConfig
from server.telemetry.indicators import Indicator

BATCH = 100_000  # indicators a pass over the index reads for (its memory follows the
# sightings found, server/hunt/tallies.py; its time, the blocks read: once a pass)
HUNTED_NETWORK_ADDRESSES = 256
PREVALENCE_DAYS = 7
LIVE_DAYS = 2


@dataclass
class Matched:
    indicators: int = 0
    hunted: int = 0
    sightings: int = 0
    new_sightings: int = 0
    held: int = 0

    def add(self, other: "Matched") -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _indicator(kind: str, value: str) -> Indicator | None:
    """The hunt's indicator of a stored value; None when it is not hunted."""
    if kind == "md5":
        return None
    if kind == "network" and \
            ipaddress.ip_network(value).num_addresses > HUNTED_NETWORK_ADDRESSES:
        return None
    return Indicator(kind, value, value)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)


def _window(days: int) -> tuple[datetime, datetime]:
    """The first midnight of the last `days` days (UTC), and today's."""
    today = datetime.now(timezone.utc).date()
    return _midnight(today - timedelta(days=days - 1)), _midnight(today)


def _asked(indicators: list[Indicator],
           days: int) -> tuple[list[tuple[str, str]], list[int], datetime, datetime]:
    """The index's values of the indicators, the indicator each is one of, and the window
    of the last `days` days."""
    asked, slots = [], []
    for n, wanted_indicator in enumerate(indicators):
        for value in wanted_indicator.postings():
            asked.append(value)
            slots.append(n)
    return asked, slots, *_window(days)


async def _found(db: Database, indicators: list[Indicator], days: int,
                 wanted: int) -> list[Sightings]:
    """Each indicator's `wanted` earliest routers over the last `days` days, from the packed
    days and from today's rows alike."""
    asked, slots, since, until = _asked(indicators, days)
    return await sightings(db, asked, slots, since, until, wanted, max(wanted, UNPACKED_READS))


def held_above(config: IntelConfig, routers: int) -> int:
    """Routers past which a value is held."""
    return max(intel_db.HELD_FLOOR, int(config.prevalence_max * routers))


async def match(db: Database, config: IntelConfig, batch: list[tuple[str, str, str]],
                days: int, actor: str) -> Matched:
    """One batch of (kind, value, source) over the last `days` days."""
    result = Matched(indicators=len(batch))
    broad = [(kind, value, None) for kind, value, _ in batch if _broad(kind, value)]
    hunted = [(kind, value, source, found) for kind, value, source in batch
              if (found := _indicator(kind, value)) is not None]
    result.hunted = len(hunted)
    # Every value's routers in one pass over the index, folded per router as they are read
    # (server/hunt/tallies.py); a value more than the prevalence limit saw is a suspect,
    # held or read again whole on its own. The limit is a share of the routers that count
    # for the fleet: fresh MACs, however many, neither raise it nor count toward it.
    registered = await intel_db.registered_routers(db)
    limit = held_above(config, await intel_db.counted_routers(db, config.min_router_age,
                                                               config.keyed))
    tallied = await _tallied(db, [h[3] for h in hunted], days, limit,
                             config.retro_hunt_processes) if hunted else []
    suspects = [n for n, one in enumerate(tallied) if one.over]
    rows = [(router.mac, kind, value, source, router.first, router.last, router.days,
             router.records)
            for (kind, value, source, _), one in zip(hunted, tallied)
            for router in one.routers]
    held, more = await _suspects(db, config, [hunted[n] for n in suspects], days, limit,
                                 registered)
    rows += more
    async with db.transaction() as cur:
        for note, values in held.items():
            result.held += await intel_db.hold(cur, values, note, actor)
        result.held += await intel_db.hold(cur, broad, BROAD_NOTE, actor)
        result.new_sightings = await intel_db.record_sightings(
            cur, rows, list(config.service_networks))
    result.sightings = len(rows)
    return result


async def _tallied(db: Database, indicators: list[Indicator], days: int,
                   cap: int, processes: int) -> list[Tallied]:
    asked, slots, since, until = _asked(indicators, days)
    return await router_tallies(db, asked, slots, len(indicators), since, until, cap,
                                processes)


BROAD_NOTE = (f"a network broader than /{intel_db.BROADEST_PREFIX[4]} (IPv4) or "
              f"/{intel_db.BROADEST_PREFIX[6]} (IPv6)")


def _broad(kind: str, value: str) -> bool:
    if kind != "network":
        return False
    network = ipaddress.ip_network(value)
    return network.prefixlen < intel_db.BROADEST_PREFIX[network.version]


RECENTLY_PREVALENT = "seen by too much of the fleet"
PREVALENT_IN_WINDOW = "seen by too much of the fleet over the days hunted"


async def _suspects(db: Database, config: IntelConfig, suspects: list[tuple], days: int,
                    limit: int, registered: int) -> tuple[dict[str, list[tuple]], list[tuple]]:
    """The values more than `limit` routers saw over the window, each judged on the routers
    that count for the fleet (old enough, and keyed in key mode: fresh MACs can neither get a
    real indicator held nor make one seem rare), every one of them read: held when more
    than `limit` of those saw it in the last PREVALENCE_DAYS (it would fire at every
    router), or over the whole window (it would tell that many households); else sighted at
    every router that saw it. The held values by why, and the sightings' rows."""
    if not suspects:
        return {}, []
    trusted = await intel_db.trusted_routers(db, config.min_router_age, config.keyed)
    everyone = registered + 1
    recent = await _found(db, [s[3] for s in suspects], PREVALENCE_DAYS, everyone)
    held: dict[str, list[tuple]] = {RECENTLY_PREVALENT: [], PREVALENT_IN_WINDOW: []}
    rest = []
    for suspect, one in zip(suspects, recent):
        counted = _counted(one, trusted)
        if counted > limit:
            held[RECENTLY_PREVALENT].append((suspect[0], suspect[1], counted))
        else:
            rest.append(suspect)
    rows = []
    whole = await _found(db, [s[3] for s in rest], days, everyone) if rest else []
    for (kind, value, source, _), one in zip(rest, whole):
        counted = _counted(one, trusted)
        if counted > limit:
            held[PREVALENT_IN_WINDOW].append((kind, value, counted))
            continue
        rows += [(seen.mac, kind, value, source, seen.first, seen.last, len(seen.days),
                  seen.records) for seen in one.earliest]
    return held, rows


def _counted(one: Sightings, trusted: set[str]) -> int:
    return sum(1 for seen in one.earliest if seen.mac in trusted)


async def retro_hunt(db: Database, config: IntelConfig, actor: str) -> Matched:
    """Every indicator not hunted yet, over HUNT_RETENTION_DAYS, batch after batch; each
    batch recorded in intel_log. One at a time across processes (the jobs and the command):
    another already at it hunts these too."""
    async with exclusive(db, "intel-retro-hunt") as acquired:
        return await _retro_hunt(db, config, actor) if acquired else Matched()


async def _retro_hunt(db: Database, config: IntelConfig, actor: str) -> Matched:
    total = Matched()
    while batch := await intel_db.unhunted(db, BATCH):
        matched = await match(db, config, batch, config.retention_days, actor)
        async with db.transaction() as cur:
            await intel_db.mark_hunted(cur, [(kind, value) for kind, value, _ in batch])
            await intel_db.log(cur, actor, "retro-hunt", {
                "days": config.retention_days, **vars(matched)})
        total.add(matched)
    return total


async def live_match(db: Database, config: IntelConfig, actor: str) -> Matched:
    """The current indicators the index gained postings of since the last run (and those
    released since), over the last LIVE_DAYS days, the uploads acknowledged before it
    indexed first: its cost follows the uploads of the last minutes, not the feeds' size (a
    red team's feed of 1,000,000 indicators kept the minute's match running 55 to 86 s of
    every 60 when it read every one). The first run reads every current indicator once."""
    await index_pending(db, config.hunt.budget, HUNT_WAIT_SECONDS, config.hunt.lanes)
    mark = await indexed_until(db)
    since = await intel_db.live_mark(db)
    if since is None:
        indicators = await intel_db.current(db)
    else:
        first_day, _ = _window(LIVE_DAYS)
        indicators = await intel_db.touched(db, await posted_since(db, since, first_day),
                                            since)
    total = Matched()
    for start in range(0, len(indicators), BATCH):
        total.add(await match(db, config, indicators[start:start + BATCH], LIVE_DAYS,
                              actor))
    await intel_db.set_live_mark(db, mark)
    return total
