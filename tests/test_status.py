"""`router-backend status` (issue 16) against a database in a known state, built through the
real API and commands where there is one."""

from __future__ import annotations

import subprocess

import orjson

from server.db.lifecycle import open_database
from server.jobs.preprocess import run_preprocess
from testkit.database import command_env
from testkit.payloads import store_payload_objects
from testkit.rule_archives import ruleset_settings
from testkit.server import free_port
from tests.commands import router_backend

CURRENT, BEHIND, BROKEN, SILENT = (f"aa:bb:cc:00:16:{n:02x}" for n in (0x21, 0x22, 0x23, 0x24))
RECORD = b'{"event_type": "alert", "alert": {"signature_id": 1, "severity": 3}}\n'


def status(settings, *args: str) -> subprocess.CompletedProcess:
    """The command, where nothing listens (no service runs: the test's app is in-process)."""
    return router_backend(command_env(settings, LISTEN_PORT=str(free_port())), "status",
                          *args)


async def test_status_reports_the_fleet(database, tmp_path, make_client, sql):
    settings = ruleset_settings("fixture", database, tmp_path)
    empty = status(settings)
    assert empty.returncode == 0 and "none published yet" in empty.stdout
    assert empty.stdout.startswith("service        NOT RUNNING: nothing answers at http://")
    # A database restored into a new DATA_DIR: its record of a run, none of the files it made.
    sql.rows("INSERT INTO job_runs (job, status, finished_at) "
             "VALUES ('rulepreprocess', 'succeeded', now())")
    restored = status(settings).stdout
    assert "none in this host's RULE_DATA_DIR, although the database records a successful " \
           "preprocess run" in restored, restored
    sql.rows("DELETE FROM job_runs")
    await run_preprocess(settings)
    client = await make_client(settings)
    for mac in (CURRENT, BEHIND, BROKEN, SILENT):
        assert (await client.get("/rules/last_updated", headers={"X-ID": mac})).status == 200
    async with open_database(settings) as db:
        for mac in (CURRENT, BEHIND, BROKEN):
            await store_payload_objects(db, mac, {"ids": {"r": mac}, "firewall": {"f": mac}})
    etags = dict(sql.rows("SELECT mac::text, ids_etag FROM router_rules"))
    firewall = dict(sql.rows("SELECT mac::text, firewall_etag FROM router_rules"))
    for mac, ids_etag, ok in ((CURRENT, etags[CURRENT], True), (BEHIND, "stale", True),
                              (BROKEN, etags[BROKEN], False)):
        response = await client.post("/rules/applied", headers={"X-ID": mac}, json={
            "ids_etag": ids_etag, "firewall_etag": firewall[mac], "ok": ok,
            "detail": None if ok else "suricata: rules failed to load"})
        assert response.status == 200
    headers = {"X-ID": CURRENT, "Content-Type": "application/x-ndjson"}
    assert (await client.post("/log/events", data=RECORD * 5 + b"{bad\n",
                              headers=headers)).status == 200
    await client.close()  # the tally is written at shutdown
    sql.rows("UPDATE routers SET registered_at = now() - interval '30 days' WHERE mac = %s",
             (SILENT,))
    sql.rows("DELETE FROM activations WHERE mac = %s", (SILENT,))
    sql.rows("UPDATE generation_queue SET attempts = 3, last_error = 'worker timed out', "
             "next_due_at = now() - interval '2 hours' WHERE mac = %s", (BROKEN,))
    sql.rows("INSERT INTO notifications (id, user_id, type, title, message, recipient, status) "
             "VALUES (gen_random_uuid(), 'u', 'scan_failed', 't', 'm', 'x@example.org', "
             "'failed')")

    result = status(settings, "--json")
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["routers"] == {
        "registered": 4, "seen_last_day": 3, "silent_over_a_week": 1,
        "by_last_poll": {"within an hour": 3, "within a day": 0, "within 7 days": 0,
                         "over 7 days ago": 0, "never": 1},
        "not_unicast": 0, "not_unicast_listed": []}
    assert (report["applied"]["reporting"], report["applied"]["behind_current_payloads"],
            report["applied"]["failed_to_load"]) == (3, 1, 1)
    assert report["applied"]["failures"][0]["mac"] == BROKEN
    queue = report["generation_queue"]
    assert (queue["overdue"], queue["failing"]) == (1, 1) and queue["due"] >= 1
    assert queue["failures"] == [{"mac": BROKEN, "attempts": 3,
                                  "last_error": "worker timed out"}]
    assert report["ruleset"]["version"] == "fixture"
    assert report["last_preprocess"] is None  # run directly, not as the job
    assert report["telemetry_last_hour"] == {"events": {"accepted": 5, "rejected": 1},
                                             "cfm": {"accepted": 0, "rejected": 0}}
    assert report["notifications"] == {"failed": 1, "pending": 0}

    text = status(settings).stdout
    assert "4 registered, 3 seen in the last day, 1 silent for more than a week" in text
    assert f"{BROKEN}, 3 attempts: worker timed out" in text
    assert "events 5 accepted, 1 rejected" in text


def test_a_long_error_takes_one_line_of_the_table(database, tmp_path, sql):
    """A new user's failing preprocess left an error of five lines, which broke the table:
    each error is its first line, cut at 160 characters; --json keeps it whole."""
    settings = ruleset_settings("fixture", database, tmp_path)
    error = "archive unreadable: " + "x" * 300 + "\nTraceback (most recent call last):\n  ..."
    sql.rows("INSERT INTO job_runs (job, status, finished_at, error) "
             "VALUES ('rulepreprocess', 'failed', now(), %s)", (error,))
    table = status(settings).stdout
    [line] = [line for line in table.splitlines() if "last preprocess run" in line]
    assert line.endswith("…") and "Traceback" not in table
    assert len(line.split("failed: ", 1)[1]) == 160
    whole = orjson.loads(status(settings, "--json").stdout)
    assert whole["last_preprocess"]["error"] == error


def test_a_minutes_match_longer_than_its_interval_is_said(database, tmp_path, sql):
    """A red team's feed kept `intel-match` running 55 to 86 s of every 60: status says how
    many of the last hour's runs took longer than the schedule's interval."""
    settings = ruleset_settings("fixture", database, tmp_path)
    sql.rows("INSERT INTO job_runs (job, status, started_at, finished_at) VALUES "
             "('intel-match', 'succeeded', now() - interval '90 s', now() - interval '15 s'), "
             "('intel-match', 'succeeded', now() - interval '10 s', now() - interval '5 s')")
    table = status(settings).stdout
    assert "intel match    last hour: 2 runs, slowest 75.0 s, 1 longer than its interval " \
           "(60 s)" in table, table
    whole = orjson.loads(status(settings, "--json").stdout)
    assert whole["intel_match"]["longer_than_interval"] == 1
