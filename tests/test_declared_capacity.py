"""A router's own payloads (its IDS rules and firewall list) are generated within what it
declares in Router-Capacity on its polls (`rules`, `sets`, `ja4`): stored with its place in
the generation queue, regenerated when it changes, at most once every few minutes however
often it changes (docs/router-api.md, "Capacity")."""

from __future__ import annotations

from datetime import timedelta

import pytest

from server.db.pool import execute
from server.generation import declarations
from server.generation.sql import RESCHEDULE
from server.polling.capacity import Declared
from server.removal import unsubscribe
from server.typedefs import DATABASE, DECLARATIONS
from server.jobs.preprocess import run_preprocess
from testkit.payloads import unpack
from testkit.rule_archives import ruleset_settings
from testkit.waiting import wait_for
from tests.test_agent import MAC as AGENT_MAC, config_for, run_round, url_of
from tests.test_console import SUPPORT, console_settings, sign_in

MAC = "aa:bb:cc:00:0c:01"


@pytest.fixture
async def generating(database, tmp_path, make_client):
    settings = ruleset_settings("fixture", database, tmp_path)
    await run_preprocess(settings)
    return await make_client(console_settings(settings.replace(rule_generation_enabled=True)))


async def poll(client, capacity: str | None) -> int:
    headers = {"X-ID": MAC} if capacity is None else {"X-ID": MAC, "Router-Capacity": capacity}
    return (await client.get("/rules/last_updated", headers=headers)).status


def payloads(sql) -> tuple[dict, dict] | None:
    rows = sql.rows("SELECT ids_payload_gz, firewall_payload_gz FROM router_rules "
                    "WHERE mac = %s", (MAC,))
    if not rows or rows[0][0] is None:
        return None
    return unpack(bytes(rows[0][0])), unpack(bytes(rows[0][1]))


async def generated(sql) -> tuple[dict, dict] | None:
    return payloads(sql)


async def scheduled(sql) -> bool:
    """The router's first generation done and its next one an interval away."""
    return sql.value("SELECT next_due_at > now() + interval '1 minute' FROM generation_queue "
                     "WHERE mac = %s", (MAC,))


def declared(sql, mac: str = MAC) -> tuple:
    return sql.rows("SELECT declared_rules, declared_sets, declared_ja4 FROM generation_queue "
                    "WHERE mac = %s", (mac,))[0]


async def test_the_routers_payloads_fit_what_it_declared_and_follow_a_change(generating, sql):
    client = generating
    assert await poll(client, "datasets=1000, rules=2, sets=1") == 200

    async def bounded():
        found = payloads(sql)
        return found if found and found[0]["rule_count"] <= 2 else None

    ids, firewall = await wait_for(bounded)  # a first generation that raced the
    # declaration is followed by one within it at once
    assert ids["rule_count"] == 2 and firewall["entry_count"] == 1 and firewall["truncated"]
    assert declared(sql) == (2, 1, False)
    assert (await sign_in(client, SUPPORT)).status == 303
    page = await (await client.get(f"/console/routers/{MAC}")).text()
    assert "2 IDS rules, 1 entries a firewall set; no JA4" in page

    # The declaration dropped: due again, not before five minutes after the last generation.
    assert await poll(client, "datasets=1000") == 200
    assert declared(sql) == (None, None, False)
    assert sql.value("SELECT next_due_at = generated_at + interval '5 minutes' "
                     "FROM generation_queue WHERE mac = %s", (MAC,))
    sql.rows("UPDATE generation_queue SET next_due_at = now() WHERE mac = %s", (MAC,))

    async def whole():
        found = payloads(sql)
        return found if found and found[0]["rule_count"] > 2 else None

    ids, firewall = await wait_for(whole)
    assert ids["rule_count"] == 6 and firewall["entry_count"] > 1  # the operator's bounds


async def test_an_absurd_declaration_is_refused_or_clamped_and_nothing_else_changes(
        generating, sql):
    client = generating
    assert await poll(client, "rules=10, sets=65536") == 200
    await wait_for(lambda: generated(sql))
    for header in ("rules=-1", "rules=1234567890123456", "rules=1, rules=2", "rules=x",
                   "rule=5", "rules=" + "9" * 1_000_000):
        answer = await client.get("/rules/last_updated",
                                  headers={"X-ID": MAC, "Router-Capacity": header})
        assert answer.status == 400, header
        if len(header) < 200:  # a longer one is refused by aiohttp's parser, in plain text
            assert "Router-Capacity" in (await answer.json())["error"]
        assert declared(sql) == (10, 65536, False), header
    # Fifteen digits is a number the grammar takes: past every bound, so the operator's.
    assert await poll(client, "rules=999999999999999, sets=999999999999999, ja4=1") == 200
    assert declared(sql) == (999999999999999, 999999999999999, True)


async def test_a_router_changing_its_declaration_at_every_poll_is_not_regenerated_each_time(
        generating, sql):
    client = generating
    assert await poll(client, "rules=3") == 200
    await wait_for(lambda: scheduled(sql))
    for n in range(20):
        assert await poll(client, f"rules={4 + n % 2}") == 200
        assert sql.value("SELECT next_due_at >= generated_at + interval '5 minutes' "
                         "FROM generation_queue WHERE mac = %s", (MAC,))
    assert declared(sql) == (5, None, False)


async def test_the_reference_agent_declares_its_rules_and_sets(generating, sql, tmp_path):
    config = config_for(tmp_path, url_of(generating), rule_count=2, set_entries=1, ja4=True,
                        intel=False, firewall_test_command=("true",),
                        firewall_reload_command=("true",))
    assert "rules=2" in config.capacity_header
    assert "rules=" not in config_for(tmp_path, url_of(generating)).capacity_header
    await run_round(config)
    assert declared(sql, AGENT_MAC) == (2, 1, True)


async def test_a_poll_writes_the_declaration_only_when_it_may_have_changed(
        generating, sql, monkeypatch):
    """A process writes a router's declaration at its first poll there and when the header
    changes; the same header again writes nothing until RECHECK_SECONDS passed (another
    process may have written another meanwhile: then it is written again)."""
    client = generating
    assert await poll(client, "rules=7") == 200
    assert declared(sql) == (7, None, False)
    sql.rows("UPDATE generation_queue SET declared_rules = 8 WHERE mac = %s", (MAC,))
    assert await poll(client, "rules=7") == 200  # as another process had written
    assert declared(sql) == (8, None, False)
    monkeypatch.setattr(declarations, "RECHECK_SECONDS", 0.0)
    assert await poll(client, "rules=6") == 200  # changed: written
    assert declared(sql) == (6, None, False)
    sql.rows("UPDATE generation_queue SET declared_rules = 8 WHERE mac = %s", (MAC,))
    assert await poll(client, "rules=6") == 200  # the same, but past the recheck
    assert declared(sql) == (6, None, False)


async def test_a_router_removed_and_registered_again_has_its_declaration_written(
        generating, sql):
    """The process forgets what it wrote for a router removed (the change feed's key
    channel): the same header at the new registration's first poll is written."""
    client = generating
    assert await poll(client, "rules=7") == 200
    assert declared(sql) == (7, None, False)
    assert await unsubscribe(client.app[DATABASE], MAC)
    async def forgotten() -> bool:
        return not client.app[DECLARATIONS].unchanged(MAC, Declared(rules=7))
    await wait_for(forgotten, timeout=10, interval=0.02)
    assert await poll(client, "rules=7") == 200  # registered again
    assert declared(sql) == (7, None, False)


async def test_a_declaration_changed_during_a_generation_waits_the_gap_after_it(
        generating, sql):
    """The review's race: a header changed while the router was generated made it due at
    once again (two generations seconds apart); it waits the gap after that generation."""
    client = generating
    assert await poll(client, "rules=3") == 200
    await wait_for(lambda: scheduled(sql))
    sql.rows("UPDATE generation_queue SET claimed_by = 'test', claimed_until = now() + "
             "interval '1 minute' WHERE mac = %s", (MAC,))  # a generation under way
    assert await poll(client, "rules=4") == 200
    async with client.app[DATABASE].cursor() as cur:  # it ends, made with rules=3
        await execute(cur, RESCHEDULE, {"key": MAC, "owner": "test", "seconds": 0.1,
                                        "interval": timedelta(hours=1), "rules": 3,
                                        "sets": None, "ja4": False})
    assert sql.value("SELECT next_due_at - generated_at FROM generation_queue WHERE mac = %s",
                     (MAC,)) == timedelta(minutes=5)


async def test_a_changed_declaration_keeps_a_failing_routers_backoff(generating, sql):
    client = generating
    assert await poll(client, "rules=3") == 200
    await wait_for(lambda: scheduled(sql))
    sql.rows("UPDATE generation_queue SET attempts = 4, next_due_at = now() + "
             "interval '8 minutes' WHERE mac = %s", (MAC,))  # as four failures leave it
    assert await poll(client, "rules=4") == 200
    assert declared(sql) == (4, None, False)
    assert sql.value("SELECT next_due_at > now() + interval '7 minutes' FROM generation_queue "
                     "WHERE mac = %s", (MAC,))
