"""The first day with the hunt and the console (issue 62): what a newcomer meets, each
answering as the issue asks. The hunt's items (one indicator syntax, networks, days said
plainly) are in tests/test_hunt_packed.py."""

from __future__ import annotations

from testkit.database import command_env
from tests.commands import router_backend


async def test_a_router_is_a_unicast_mac(make_client, settings, sql):
    """Issue 62: broadcast and multicast MACs are refused wherever a MAC is taken; rows of
    before are left alone and `status` names them."""
    client = await make_client(settings)
    for group in ("ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01", "01005e000001"):
        answer = await client.get("/rules/last_updated", headers={"X-ID": group})
        assert answer.status == 400 and "unicast" in (await answer.json())["error"]
        done = router_backend(command_env(settings), "telemetry", "export", "--mac", group)
        assert done.returncode == 2 and "unicast" in done.stderr
    assert sql.value("SELECT count(*) FROM routers WHERE mac = 'ff:ff:ff:ff:ff:ff'") == 0
    sql.rows("INSERT INTO routers (mac) VALUES ('01:00:5e:00:00:01')")  # as before
    status = router_backend(command_env(settings), "status")
    assert "1 with a MAC that is not unicast" in status.stdout
    assert "01:00:5e:00:00:01" in status.stdout
