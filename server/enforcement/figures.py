"""What the fleet's firewalls enforced, for operators (`router-backend intel effectiveness`,
the console, the metrics) and for one router (its console page).

Counted over the last 1, 7 or 30 days (today, UTC, included) from the reports of routers
that count for the fleet (registered FLEET_MIN_ROUTER_AGE_HOURS ago, keyed in key mode), by
router and by reporter network (a /24, a /48, at most 3 /48s of one IPv6 /32), as the
fleet's own evidence is: an entry's rank is the networks it matched at, so one owner of many
routers behind one network, or a thousand fresh MACs, move it by one network or none.
Packets and bytes are summed as the routers said them (each bounded by a 10 Gbit/s day).
A threat feed is credited with a matched block entry when one of its current addresses or
networks lies inside it (overlapping values are merged into one entry on the router)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from decimal import Decimal

from server.db.pool import Database, execute
from server.enforcement import sql
from server.fleet.sql import ATTACKERS_LISTED
from server.enforcement.config import EnforcementConfig

WINDOWS = (1, 7, 30)  # days
TOP_ENTRIES = 10


@dataclass(frozen=True)
class ListFigures:
    list: str
    routers: int            # reported it (it was loaded)
    networks: int
    matched_routers: int    # it dropped something there
    matched_networks: int
    packets: int
    bytes: int
    alerts: int             # its rules' (intel, ids.*)
    entries_matched: int
    entries_never_matched: int | None  # of the fleet's list now; None: not one list


_COUNTED = [field.name for field in fields(ListFigures)][:-1]  # the statement's columns


@dataclass(frozen=True)
class FeedFigures:
    feed: str
    values: int             # its current addresses and networks
    values_matched: int
    values_never_matched: int
    matched_routers: int
    matched_networks: int
    packets: int
    bytes: int


@dataclass(frozen=True)
class EntryFigures:
    list: str
    entry: str
    networks: int
    routers: int
    packets: int
    bytes: int


@dataclass(frozen=True)
class Effectiveness:
    days: int
    lists: list[ListFigures]
    feeds: list[FeedFigures]
    top: list[EntryFigures]

    def as_json(self) -> dict:
        return asdict(self)


async def effectiveness(db: Database, config: EnforcementConfig, days: int) -> Effectiveness:
    """The fleet's figures over the last `days` days."""
    if days not in WINDOWS:
        raise ValueError(f"days: one of {WINDOWS}")
    async with db.transaction() as cur:  # one snapshot for every figure
        params = {"today": await sql.today(cur), "days": days,
                  "min_age": config.min_router_age, "top": TOP_ENTRIES}
        await execute(cur, sql.lists_statement(config.keyed), params)
        list_rows = await cur.fetchall()
        await execute(cur, ATTACKERS_LISTED)
        fleet_size = (await cur.fetchone() or (0,))[0]
        await execute(cur, sql.feeds_statement(config.keyed), params)
        feed_rows = await cur.fetchall()
        await execute(cur, sql.entries_statement(config.keyed), params)
        entry_rows = await cur.fetchall()
    list_rows, feed_rows, entry_rows = (_whole(rows) for rows in (list_rows, feed_rows,
                                                                   entry_rows))
    lists = [ListFigures(**dict(zip(_COUNTED, row)), entries_never_matched=max(
        0, fleet_size - row[-1]) if row[0] == "fleet" else None) for row in list_rows]
    feeds = [FeedFigures(name, values, matched, values - matched, *rest)
             for name, values, matched, *rest in feed_rows]
    top = [EntryFigures(*row[:6]) for row in entry_rows]
    return Effectiveness(days, lists, feeds, top)


async def matched_values(db: Database, config: EnforcementConfig, days: int = 30
                         ) -> list[tuple]:
    """Each threat feed's value that matched at FLEET_MIN_NETWORKS networks or more, with
    the networks it matched at: (kind, value, networks)."""
    return await _widely_matched(db, config, sql.matched_values_statement(config.keyed), days)


async def matched_fleet(db: Database, config: EnforcementConfig, days: int = 30
                        ) -> list[tuple]:
    """Each address of the fleet's list that matched at FLEET_MIN_NETWORKS networks or more,
    with the networks it matched at: (address, networks)."""
    return await _widely_matched(db, config, sql.matched_fleet_statement(config.keyed), days)


async def _widely_matched(db: Database, config: EnforcementConfig, statement: str, days: int
                          ) -> list[tuple]:
    async with db.transaction() as cur:
        params = {"today": await sql.today(cur), "days": days,
                  "min_age": config.min_router_age, "min_networks": config.min_networks}
        await execute(cur, statement, params)
        return [tuple(row) for row in await cur.fetchall()]


@dataclass(frozen=True)
class RouterDay:
    day: str
    list: str
    packets: int
    bytes: int
    alerts: int
    reports: int


async def router_enforcement(db: Database, mac: str, days: int = 7
                             ) -> tuple[list[RouterDay], list[tuple[str, str, int, int]]]:
    """One router's reported days, newest first, and its entries most matched over them
    (list, entry, packets, bytes)."""
    async with db.transaction() as cur:
        params = {"mac": mac, "today": await sql.today(cur), "days": days,
                  "top": TOP_ENTRIES}
        await execute(cur, sql.ROUTER_DAYS, params)
        reported = [RouterDay(day.isoformat(), *rest) for day, *rest in
                    _whole(await cur.fetchall())]
        await execute(cur, sql.ROUTER_ENTRIES, params)
        entries = [tuple(row) for row in _whole(await cur.fetchall())]
    return reported, entries


def _whole(rows: list[tuple]) -> list[tuple]:
    """Rows with PostgreSQL's sums (numeric: a fleet's bytes can pass 2^63) as ints."""
    return [tuple(int(value) if isinstance(value, Decimal) else value for value in row)
            for row in rows]
