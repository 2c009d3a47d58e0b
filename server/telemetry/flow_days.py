"""A router's hourly flow summaries of a closed day packed into one row of
telemetry_flow_days (migration 0035), by the compaction job.

The flow summaries keep a row per router, hour and destination port (or application
protocol) seen; at the agent's cadence most ports are seen once an hour, so a router-day
took 528 rows of about 200 bytes (a heap row and two index entries for a handful of
numbers): 110 bytes a record for each day kept, two thirds of the summaries
(docs/performance.md). Once a day is over and settled, no upload adds to its hours, so
each router's rows of that day are taken out and written as one row of arrays, an entry
per row, which generation reads with the rows of the open days (server/telemetry/sql.py
FLOWS_IN_WINDOW): the same sums, hour by hour. One transaction per router and day: a
crash leaves the day as rows or as its packed row, never both nor neither.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from server.db.pool import Database, execute
from server.telemetry.sql import (ADD_FLOW_DAY, DAY_FLOW_ROUTERS, OLDEST_FLOW_HOUR,
                                  TAKE_DAY_FLOWS)

DAY = timedelta(days=1)
PAUSE_SECONDS = 0.001   # between routers: lets ingestion's statements through


def closed_days(since: datetime, settled: datetime) -> list[datetime]:
    """The UTC days from the one holding `since` that ended by `settled`."""
    day = since.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    days = []
    while day + DAY <= settled:
        days.append(day)
        day += DAY
    return days


async def pack_flow_days(db: Database, since: datetime | None, settled: datetime) -> dict:
    """Pack each router's hourly flow rows of each day from `since`'s (None: the oldest
    row's) that ended by `settled`; the days and router-days packed."""
    packed: dict = {"days": [], "router_days": 0}
    if since is None:
        since = (await db.fetchrow(OLDEST_FLOW_HOUR, {"settled": settled}))[0] or settled
    for day in closed_days(since, settled):
        routers = await db.fetchall(DAY_FLOW_ROUTERS, {"day": day, "end": day + DAY})
        for (mac,) in routers:
            await _pack(db, mac, day)
            await asyncio.sleep(PAUSE_SECONDS)
        if routers:
            packed["days"].append(day.date().isoformat())
            packed["router_days"] += len(routers)
    return packed


async def _pack(db: Database, mac: str, day: datetime) -> None:
    async with db.transaction() as cur:
        await execute(cur, TAKE_DAY_FLOWS, {"mac": mac, "day": day, "end": day + DAY})
        rows = sorted(await cur.fetchall(), key=_row_order)
        if not rows:   # packed by another run meanwhile
            return
        await execute(cur, ADD_FLOW_DAY, {
            "mac": mac, "day": day,
            "hours": [(hour - day) // timedelta(hours=1) for hour, _, _, _ in rows],
            "app_protos": [app_proto for _, app_proto, _, _ in rows],
            "dest_ports": [dest_port for _, _, dest_port, _ in rows],
            "flows": [flows for _, _, _, flows in rows]})


def _row_order(row: tuple) -> tuple:
    hour, app_proto, dest_port, _ = row
    return hour, app_proto or "", -1 if dest_port is None else dest_port
