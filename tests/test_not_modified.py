"""The 304 of a rules poll, decided in the handler from the ETag cache (server/polling/):
answered without a query, counted like any other answer, and no check skipped for it: the
request budget, the key, the header's form, another ETag."""

from __future__ import annotations

import asyncio
import time

from server.routers import key_sql as keys_db
from server.generation import rules_sql as rules_db
from server.routers import sql as router_db
from server.db.lifecycle import open_database
from server.polling.etag_cache import not_modified, wanted_etags
from server.routers.keys import key_hash
from server.typedefs import ETAG_CACHE, METRICS
from testkit.database import settings_for
from testkit.payloads import store_payload_objects

MAC = "aa:bb:cc:00:00:77"


async def stored_and_cached(client, settings) -> str:
    """Store a payload, poll it (200) until the cache keeps its ETag, return the ETag as
    sent."""
    cache = client.server.app[ETAG_CACHE]
    deadline = time.monotonic() + 10
    while not cache.listening:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    changes = cache.token()
    async with open_database(settings) as db:
        await router_db.register(db, MAC)
        await store_payload_objects(db, MAC, {"ids": {"version": "1", "rules": []},
                                              "firewall": {"entries": []}})
    # The store's notification (when it changed the payload), heard after the poll below,
    # would make the cache forget what the poll remembered: heard first, or polled again.
    settled = time.monotonic() + 0.5
    while cache.token() == changes and time.monotonic() < settled:
        await asyncio.sleep(0.02)
    while True:
        response = await client.get("/rules/ids", headers={"X-ID": MAC,
                                                           **client.extra_headers})
        assert response.status == 200
        await asyncio.sleep(0.1)
        if cache.etag(MAC, "ids") is not None:
            return response.headers["ETag"]
        assert time.monotonic() < deadline


def answered_304(client) -> float:
    metrics = client.server.app[METRICS]
    metrics.record_requests()  # (as a scrape does first)
    return metrics.registry.get_sample_value(
        "http_requests_total", {"route": "/rules/ids", "method": "GET", "status": "304"}) or 0


async def test_a_cached_304_is_counted_and_asks_no_query(make_client, settings, monkeypatch):
    client = await make_client(settings)
    client.extra_headers = {}
    etag = await stored_and_cached(client, settings)
    before = answered_304(client)

    async def no_query(*args):
        raise AssertionError("a poll with the cached ETag read the payload")

    monkeypatch.setattr(rules_db, "read_payload", no_query)
    for sent in (etag, etag.removeprefix("W/"), f'"other", {etag}', "*"):
        response = await client.get("/rules/ids", headers={"X-ID": MAC,
                                                            "If-None-Match": sent})
        assert response.status == 304 and response.headers["ETag"] == etag
    assert answered_304(client) == before + 4
    monkeypatch.undo()
    other = await client.get("/rules/ids", headers={"X-ID": MAC, "If-None-Match": '"old"'})
    assert other.status == 200 and await other.json() == {"version": "1", "rules": []}


async def test_the_request_budget_still_holds(make_client, database, tmp_path):
    settings = settings_for(database, tmp_path, ROUTER_REQUESTS_PER_MINUTE="3")
    client = await make_client(settings)
    client.extra_headers = {}
    etag = await stored_and_cached(client, settings)  # one request spent
    statuses = []
    for _ in range(3):
        response = await client.get("/rules/ids", headers={"X-ID": MAC,
                                                            "If-None-Match": etag})
        statuses.append(response.status)
    assert statuses == [304, 304, 429]
    assert "Retry-After" in response.headers and "error" in await response.json()


async def test_a_wrong_key_is_refused_even_for_a_cached_etag(make_client, database,
                                                             tmp_path):
    settings = settings_for(database, tmp_path, ROUTER_AUTH="key")
    client = await make_client(settings)
    async with open_database(settings) as db:
        await router_db.register(db, MAC)
        assert await keys_db.set_key(db, MAC, key_hash("right-key"), replace=False)
    client.extra_headers = {"Authorization": "Bearer right-key"}
    etag = await stored_and_cached(client, settings)
    good = await client.get("/rules/ids", headers={"X-ID": MAC, "If-None-Match": etag,
                                                   "Authorization": "Bearer right-key"})
    assert good.status == 304
    for authorization in ("Bearer wrong-key", None):
        headers = {"X-ID": MAC, "If-None-Match": etag}
        if authorization:
            headers["Authorization"] = authorization
        refused = await client.get("/rules/ids", headers=headers)
        assert refused.status == 401


async def test_a_doubled_or_malformed_x_id_is_refused(make_client, settings):
    client = await make_client(settings)
    client.extra_headers = {}
    etag = await stored_and_cached(client, settings)
    doubled = await client.get("/rules/ids", headers=[("X-ID", MAC), ("X-ID", MAC),
                                                      ("If-None-Match", etag)])
    assert doubled.status == 400
    bad = await client.get("/rules/ids", headers={"X-ID": "not-a-mac", "If-None-Match": etag})
    assert bad.status == 400


def names(if_none_match: str, etag: str) -> bool:
    return not_modified(wanted_etags(if_none_match), etag)


def test_if_none_match_names():
    assert names('W/"abc"', "abc") and names('"abc"', "abc") and names("*", "abc")
    assert names(' "x" ,W/"abc"', "abc")
    assert not names('"abcd"', "abc") and not names("abc", "abc") and not names("", "abc")
