"""POST /rules/applied (issue 16): an agent reports what it loaded; bad reports are 400 and
store nothing."""

from __future__ import annotations

import pytest

from server.db.lifecycle import open_database
from testkit.payloads import store_payload_objects

MAC = "aa:bb:cc:00:16:10"
X_ID = {"X-ID": MAC}


async def report(client, body) -> tuple[int, dict]:
    response = await client.post("/rules/applied", json=body, headers=X_ID)
    return response.status, await response.json()


async def test_report_is_stored_and_compared_with_the_current_payloads(client, sql, settings):
    assert (await client.get("/rules/last_updated", headers=X_ID)).status == 200
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, {"ids": {"rules": [1]},
                                              "firewall": {"entries": [2]}})
    ids = await client.get("/rules/ids", headers=X_ID)
    etag = ids.headers["ETag"]  # W/"..."
    status, body = await report(client, {"ids_etag": etag, "firewall_etag": "old", "ok": True})
    assert (status, body) == (200, {"ids_current": True, "firewall_current": False})
    status, body = await report(client, {"ids_etag": etag.removeprefix("W/").strip('"'),
                                         "firewall_etag": None, "ok": False,
                                         "detail": "suricata: 3 rules failed to load"})
    assert (status, body) == (200, {"ids_current": True, "firewall_current": False})
    assert sql.rows("SELECT ok, detail, firewall_etag FROM router_applied") == [
        (False, "suricata: 3 rules failed to load", None)]


@pytest.mark.parametrize("body", [
    {}, {"ok": "yes"}, {"ok": True, "ids_etag": 5}, {"ok": True, "ids_etag": ""},
    {"ok": True, "ids_etag": "x" * 129}, {"ok": True, "detail": "d" * 1001},
    {"ok": True, "ids_etag": "a\nb"}, {"ok": True, "ids_etag": "caf\u00e9"},
    {"ok": True, "extra": 1}, [1, 2]])
async def test_bad_reports_are_400(client, sql, body):
    status, reply = await report(client, body)
    assert status == 400 and reply["error"]
    assert sql.value("SELECT count(*) FROM router_applied") == 0


async def test_oversized_or_broken_reports(client, sql):
    response = await client.post("/rules/applied", data=b"{" + b" " * 9000 + b"}",
                                 headers={**X_ID, "Content-Type": "application/json"})
    assert response.status == 413
    response = await client.post("/rules/applied", data=b"{not json", headers=X_ID)
    assert response.status == 400
    assert sql.value("SELECT count(*) FROM router_applied") == 0


@pytest.mark.parametrize("sent,kept", [
    ("nul \u0000", "nul \ufffd"), ("\u001b[2J\u001b[31mfake", "\ufffd[2J\ufffd[31mfake"),
    ("reversed \u202etxt.exe", "reversed \ufffdtxt.exe")])
async def test_a_detail_is_kept_as_plain_text(client, sql, sent, kept):
    status, _ = await report(client, {"ok": False, "detail": sent})
    assert status == 200
    assert sql.value("SELECT detail FROM router_applied") == kept
