"""The fault drill's stale-304 probe (bench/stale_probe.py) against a stand-in server
whose answers the test chooses: a 304 for an ETag the database replaced is counted, a 200 is
not, and nothing is judged while a fault is marked; the polls are keep-alive, as the fast
path wants them, on LANES connections at once."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from bench import stale_probe
from bench.stale_probe import LANES, StaleProbe

ROUTER, OTHER = "02:00:00:00:00:01", "02:00:00:00:00:02"


async def wait_for(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_304_for_a_replaced_etag_is_stale_and_a_fault_gives_no_verdict(
        aiohttp_server, database, sql, monkeypatch):
    monkeypatch.setattr(stale_probe, "GRACE_SECONDS", 0.2)
    monkeypatch.setattr(stale_probe, "PAUSE_SECONDS", 0.05)
    answer = {"status": 304}
    asked, connections = [], set()

    async def rules(request: web.Request) -> web.Response:
        asked.append((request.headers["X-ID"], request.headers["If-None-Match"],
                      request.keep_alive))
        connections.add(request.transport.get_extra_info("peername")[1])
        return web.Response(status=answer["status"])

    app = web.Application()
    app.router.add_get("/rules/ids", rules)
    server = await aiohttp_server(app)
    sql.rows("INSERT INTO router_rules (mac, ids_etag) VALUES (%s, 'a'), (%s, 'x')",
             (ROUTER, OTHER))
    probe = StaleProbe(f"http://127.0.0.1:{server.port}", database)
    running = asyncio.create_task(probe.run())
    try:
        await asyncio.sleep(0.3)  # the probe's first reading
        sql.rows("UPDATE router_rules SET ids_etag = 'b' WHERE mac = %s", (ROUTER,))
        await wait_for(lambda: probe.result.probes == LANES)
        # only the router whose ETag was replaced, once on each of LANES connections
        assert asked == [(ROUTER, 'W/"a"', True)] * LANES and len(connections) == LANES
        assert probe.result.stale == LANES
        stale = f"{ROUTER}: 304 for a while the database held b"
        assert probe.result.examples == [stale] * LANES

        answer["status"] = 200  # the payload sent again: right
        sql.rows("UPDATE router_rules SET ids_etag = 'c' WHERE mac = %s", (ROUTER,))
        await wait_for(lambda: probe.result.probes == 2 * LANES)
        assert probe.result.stale == LANES

        answer["status"] = 304
        probe.fault_started()  # a fault's own window: asked, not judged
        sql.rows("UPDATE router_rules SET ids_etag = 'd' WHERE mac = %s", (ROUTER,))
        await wait_for(lambda: len(asked) == 3 * LANES)
        await asyncio.sleep(0.5)
        probe.fault_ended()
        assert (probe.result.probes, probe.result.stale) == (2 * LANES, LANES)
    finally:
        probe.stop()
        await running
