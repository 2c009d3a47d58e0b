"""Operators manage subscriptions from the command line; closed mode follows them."""

from __future__ import annotations

import subprocess

from testkit.database import command_env, settings_for
from testkit.waiting import wait_for
from tests.commands import router_backend

MAC = "aa:bb:cc:00:30:01"


def command(settings, *args: str) -> subprocess.CompletedProcess:
    return router_backend(command_env(settings), "subscriptions", *args)


async def test_add_list_remove_with_closed_mode(database, tmp_path, make_client, sql):
    settings = settings_for(database, tmp_path, REGISTRATION_MODE="closed",
                            ROUTER_CACHE_SECONDS="0")
    client = await make_client(settings)
    headers = {"X-ID": MAC}
    assert (await client.get("/rules/last_updated", headers=headers)).status == 403

    added = command(settings, "add", "AA-BB-CC-00-30-01", "--note", "lab router")
    assert added.returncode == 0 and f"{MAC} subscribed" in added.stdout
    assert sql.value("SELECT count(*) FROM generation_queue WHERE mac = %s", (MAC,)) == 1
    assert (await client.get("/rules/last_updated", headers=headers)).status == 200

    listed = command(settings, "list")
    assert listed.returncode == 0
    line = [l for l in listed.stdout.splitlines() if l.startswith(MAC)][0].split("\t")
    assert line[2] == "operator" and line[3] != "never" and line[4] == "never"
    assert line[5] == "lab router"
    upload = await client.post("/log/events", data=b'{"event_type": "alert"}\n',
                               headers={**headers, "Content-Type": "application/x-ndjson"})
    assert upload.status == 200
    listed = command(settings, "list")
    line = [l for l in listed.stdout.splitlines() if l.startswith(MAC)][0].split("\t")
    assert line[4] != "never"

    removed = command(settings, "remove", MAC)
    assert removed.returncode == 0
    assert (await client.get("/rules/last_updated", headers=headers)).status == 403
    again = command(settings, "remove", MAC)
    assert again.returncode == 1 and "not registered" in again.stderr
    bad = command(settings, "add", "nonsense")
    assert bad.returncode == 2 and "not a MAC address" in bad.stderr  # bad argument: 2


async def test_a_removal_takes_effect_at_the_change_feed_not_the_cache(database, tmp_path,
                                                                       make_client, sql):
    """A process that admitted a router forgets it when told it was removed: closed mode
    refuses its next poll without waiting ROUTER_CACHE_SECONDS; open mode registers it anew
    (its generation queue row back)."""
    for mode in ("closed", "open"):
        settings = settings_for(database, tmp_path, REGISTRATION_MODE=mode,
                                ROUTER_CACHE_SECONDS="3600")
        client = await make_client(settings)
        headers = {"X-ID": MAC}
        if mode == "closed":
            assert command(settings, "add", MAC).returncode == 0
        assert (await client.get("/rules/last_updated", headers=headers)).status == 200
        assert command(settings, "remove", MAC).returncode == 0

        async def polled() -> bool:  # until its poll is refused, or registers it again
            status = (await client.get("/rules/last_updated", headers=headers)).status
            queued = sql.value("SELECT count(*) FROM generation_queue WHERE mac = %s", (MAC,))
            return (status, queued) == ((403, 0) if mode == "closed" else (200, 1))
        await wait_for(polled, timeout=10, interval=0.05)
        if mode == "open":
            assert command(settings, "remove", MAC).returncode == 0
