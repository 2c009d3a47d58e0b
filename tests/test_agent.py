"""The reference agent, router-agent (issue 25), against the real service: real EVE output
uploaded exactly once through outages, rotation, truncation and crashes; a spool that
drops its oldest when full; refusals not retried; enrollment; rules written, tested,
reloaded, restored on failure and reported; hostile payloads never reach a file."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gzip
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web

from agent.cli import EX_TEMPFAIL, Agent, status
from agent.client import Backoff
from agent.config import AgentConfig, ConfigError, load_config
from agent.tail import EveTail
from server.fleet import sql as fleet_db
from server.intel import sql as intel_db
from server.intel.config import IntelConfig
from server.intel.feeds import import_file
from server.intel.jobs import judge_and_tell
from server.db.lifecycle import open_database
from server.typedefs import ETAG_CACHE, FLEET_LIST, INTEL_LIST
from testkit.corpus import corpus_path
from testkit.database import settings_for
from testkit.payloads import store_payload_objects
from testkit.waiting import wait_for
from testkit.telemetry import stored_count, telemetry

MAC = "aa:bb:cc:00:25:01"
# The bulk of an intel list that stays across versions: a delta is answered only when
# smaller than the whole list (server/polling/versioned.py).
KEPT_DOMAINS = b"".join(b"kept%d.bad.example\n" % n for n in range(30))
REPOSITORY = Path(__file__).resolve().parent.parent


def eve_lines(name: str = "lab-zeus-eve.json") -> list[bytes]:
    return corpus_path("eve", name).read_bytes().splitlines()


def counts_by_type(lines: list[bytes]) -> dict[str, int]:
    """What the agent sends by default: alerts, and flows with the hunted protocol records
    (dns, tls, http, fileinfo, smb, ssh: meta_types) counted as flows (both go to /log/cfm)."""
    kinds = {"alert": 0, "flow": 0}
    for line in lines:
        kind = json.loads(line).get("event_type")
        if kind in ("dns", "tls", "http", "fileinfo", "smb", "ssh", "netflow"):
            kind = "flow"
        if kind in kinds:
            kinds[kind] += 1
    return kinds


def config_for(tmp_path: Path, url: str, **overrides) -> AgentConfig:
    values = dict(server_url=url, mac=MAC, state_dir=tmp_path / "state",
                  eve_json=tmp_path / "eve.json", rules_file=tmp_path / "rules" / "r.rules",
                  firewall_file=tmp_path / "rules" / "block.nft", batch_records=100,
                  timeout_seconds=5, start_delay_max_seconds=0)
    return AgentConfig(**{**values, **overrides})


def url_of(client) -> str:
    return f"http://{client.server.host}:{client.server.port}"


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def run_round(config: AgentConfig) -> tuple[int, Agent]:
    """One `router-agent run --once` round, in a thread (the agent is synchronous)."""
    agent = Agent(config)
    code = await asyncio.get_running_loop().run_in_executor(None, agent.round)
    return code, agent


def append(path: Path, lines: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as eve:
        eve.write(b"".join(line + b"\n" for line in lines))


def stored(sql) -> tuple[int, int]:
    return (stored_count(sql),
            stored_count(sql, "cfm"))


async def test_a_real_eve_file_is_uploaded_once_and_then_only_what_is_new(client, sql,
                                                                         tmp_path):
    lines = eve_lines()
    config = config_for(tmp_path, url_of(client))
    append(config.eve_json, lines)
    code, agent = await run_round(config)
    expected = counts_by_type(lines)
    assert code == 0 and stored(sql) == (expected["alert"], expected["flow"])
    assert (await run_round(config))[0] == 0 and stored(sql) == (expected["alert"],
                                                                 expected["flow"])
    more = eve_lines("lab-sensor-eve.json")[:300]
    append(config.eve_json, more)
    assert (await run_round(config))[0] == 0
    added = counts_by_type(more)
    assert stored(sql) == (expected["alert"] + added["alert"],
                           expected["flow"] + added["flow"])
    report = status(config)
    assert report["spool"]["batches"] == 0 and report["last_upload_at"]
    assert report["counters"]["records_sent"] == sum(stored(sql))
    assert report["counters"]["records_skipped"] == len(lines) + len(more) - sum(stored(sql))
    # Stored in the file's order: the agent sends its spool oldest first.
    alerts = [record for record in map(json.loads, lines + more)
              if record.get("event_type") == "alert"]
    assert [row[0] for row in telemetry(sql).rows(
        "SELECT record FROM ids_events ORDER BY chunk_id, ordinal")] == alerts


async def test_an_outage_spools_then_the_spool_goes_in_order_and_a_repeat_is_replayed(
        client, sql, tmp_path):
    lines = eve_lines()[:400]
    down = config_for(tmp_path, closed_port_url())
    append(down.eve_json, lines)
    code, _ = await run_round(down)
    spooled = status(down)["spool"]
    assert code == EX_TEMPFAIL and spooled["batches"] > 4 and stored(sql) == (0, 0)
    assert "server unavailable" in status(down)["last_error"]["error"]
    # A crash after the server stored a batch but before the agent removed it: the first
    # batch is sent by hand, then the agent sends it again with its key.
    up = dataclasses.replace(down, server_url=url_of(client))
    first = Agent(up).uploader.spool.batches()[0]
    response = await client.post(f"/log/{first.kind}", data=first.body(), headers={
        "X-ID": MAC, "Content-Type": "application/x-ndjson", "Content-Encoding": "gzip",
        "Idempotency-Key": first.key})
    assert response.status == 200
    code, agent = await run_round(up)
    expected = counts_by_type(lines)
    assert code == 0 and stored(sql) == (expected["alert"], expected["flow"])
    counters = status(up)["counters"]
    assert counters["batches_replayed"] == 1
    assert counters["batches_sent"] == spooled["batches"] - 1


async def test_a_full_spool_drops_its_oldest_batches_and_counts_them(client, sql, tmp_path):
    lines = eve_lines()
    down = config_for(tmp_path, closed_port_url(), batch_records=50, spool_max_bytes=20_000)
    append(down.eve_json, lines)
    assert (await run_round(down))[0] == EX_TEMPFAIL
    report = status(down)
    assert 0 < report["spool"]["bytes"] <= 20_000
    dropped = report["counters"]["records_dropped_spool_full"]
    assert dropped > 0 and report["counters"]["batches_dropped_spool_full"] > 0
    assert (await run_round(dataclasses.replace(down, server_url=url_of(client))))[0] == 0
    assert sum(stored(sql)) == report["spool"]["records"]
    assert sum(stored(sql)) + dropped == sum(counts_by_type(lines).values())
    # The newest survive: the last alert of the file is stored.
    last_alert = [line for line in lines if b'"event_type":"alert"' in line][-1]
    assert telemetry(sql).value("SELECT count(*) FROM ids_events WHERE record = %s::jsonb",
                     (last_alert.decode(),)) == 1


async def test_a_batch_the_server_refuses_is_dropped_and_not_retried(
        database, make_client, sql, tmp_path, caplog):
    client = await make_client(settings_for(database, tmp_path / "server",
                                            INGEST_MAX_BODY_BYTES="20000"))
    lines = eve_lines()[:200]
    config = config_for(tmp_path, url_of(client), batch_records=20)
    append(config.eve_json, lines + [b'{"event_type": "alert", "pad": "' + b"x" * 30000 +
                                     b'"}'])
    code, _ = await run_round(config)
    counters = status(config)["counters"]
    assert code == 0 and counters["batches_refused"] == 1
    assert status(config)["spool"]["batches"] == 0  # not kept for another try
    assert "refused by the server (413" in caplog.text and "cannot succeed" in caplog.text
    expected = counts_by_type(lines)
    assert stored(sql) == (expected["alert"], expected["flow"])


async def test_key_mode_enrolls_once_keeps_the_key_0600_and_uploads(
        database, make_client, sql, tmp_path):
    token = "fleet-token-for-the-agent-test"
    client = await make_client(settings_for(database, tmp_path / "server", ROUTER_AUTH="key",
                                            ENROLLMENT_TOKEN=token))
    config = config_for(tmp_path, url_of(client), enrollment_token=token)
    append(config.eve_json, eve_lines()[:100])
    assert (await run_round(config))[0] == 0
    key_file = config.key_path
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and sum(stored(sql)) > 0
    # A second agent for the same MAC (the key lost): enrollment is refused (409), no retry.
    other = config_for(tmp_path / "other", url_of(client), enrollment_token=token)
    append(other.eve_json, eve_lines()[:10])
    assert (await run_round(other))[0] == 1
    assert "409" in status(other)["last_error"]["error"]
    wrong = dataclasses.replace(config, key_file=tmp_path / "wrong-key")
    wrong.key_file.write_text("not-the-key\n")
    append(config.eve_json, eve_lines()[100:110])
    assert (await run_round(wrong))[0] == 1  # 401: the spool is kept for the right key
    assert status(wrong)["spool"]["batches"] > 0


def test_tail_follows_rotation_truncation_and_waits_for_a_whole_line(tmp_path):
    eve = tmp_path / "eve.json"
    saved = []
    tail = EveTail(eve, None, max_lines=1000, max_bytes=1 << 20, persist=saved.append)
    assert tail.read() is None  # no file yet
    eve.write_bytes(b'{"n": 1}\n{"n": 2}\n{"n": 3')
    first = tail.read()
    assert first.lines == [b'{"n": 1}', b'{"n": 2}']
    # The new file's position, then the read's end, each saved before the caller spools.
    assert [position.get("until") for position in saved] == [None, 18]
    tail.advance(first.position)
    assert tail.read() is None  # the third line is not whole yet
    append(eve, [b""])  # its newline arrives
    third = tail.read()
    assert third.lines == [b'{"n": 3']
    tail.advance(third.position)
    os.rename(eve, tmp_path / "eve.json.1")
    append(tmp_path / "eve.json.1", [b'{"n": 4}'])  # written to the old file after the rename
    append(eve, [b'{"n": 5}'])
    rest = tail.read()
    assert rest.lines == [b'{"n": 4}']
    tail.advance(rest.position)
    new = tail.read()
    assert new.lines == [b'{"n": 5}'] and new.key.split("-")[0] != rest.key.split("-")[0]
    tail.advance(new.position)
    eve.write_bytes(b'{"n": 6}\n')  # truncated, then written again (copytruncate)
    again = tail.read()
    assert again.lines == [b'{"n": 6}'] and again.key != new.key
    assert again.key.endswith("-0-9") and again.position["file_id"] != new.position["file_id"]


def rotate(eve: Path, keep: int = 5) -> None:
    for older in range(keep - 1, 0, -1):
        if (source := eve.with_name(f"eve.json.{older}")).exists():
            os.replace(source, eve.with_name(f"eve.json.{older + 1}"))
    os.replace(eve, eve.with_name("eve.json.1"))


def read_all(tail: EveTail) -> list[bytes]:
    lines = []
    while chunk := tail.read():
        lines += chunk.lines
        tail.advance(chunk.position)
    return lines


@pytest.mark.parametrize("oldest_gone", [False, True])
def test_tail_reads_every_rotation_it_missed_in_order(tmp_path, oldest_gone):
    """An agent stopped (or slow) over two rotations reads the rest of its file, then every
    file written since, oldest first; a file deleted meanwhile is skipped, not the rest."""
    eve = tmp_path / "eve.json"
    tail = EveTail(eve, None, max_lines=2, max_bytes=1 << 20, persist=lambda position: None)
    append(eve, [b'{"n": "a1"}'])
    assert read_all(tail) == [b'{"n": "a1"}']
    append(eve, [b'{"n": "a2"}'])
    rotate(eve)
    append(eve, [b'{"n": "b1"}', b'{"n": "b2"}', b'{"n": "b3"}'])
    rotate(eve)
    append(eve, [b'{"n": "c1"}'])
    if oldest_gone:
        os.unlink(tmp_path / "eve.json.2")
    expected = [b'{"n": "b1"}', b'{"n": "b2"}', b'{"n": "b3"}', b'{"n": "c1"}']
    assert read_all(tail) == ([] if oldest_gone else [b'{"n": "a2"}']) + expected


def test_the_same_bytes_read_again_give_the_same_key(tmp_path):
    """After a crash before the position was saved, the lines come again with their key."""
    eve = tmp_path / "eve.json"
    eve.write_bytes(b'{"n": 1}\n{"n": 2}\n')
    saved = []
    first = EveTail(eve, None, 1000, 1 << 20, saved.append).read()
    again = EveTail(eve, saved[-1], 1000, 1 << 20, saved.append).read()
    assert (again.lines, again.key) == (first.lines, first.key)


def test_a_read_cut_short_by_a_crash_comes_again_whole_and_alone(tmp_path):
    """Killed after spooling a read's lines and before saving the position past them, the
    agent reads the same bytes again however much the file grew meanwhile: the same lines
    under the same key, which the server replays; a longer read would have been another key,
    and its first lines stored twice (the agent drill's 40 flows stored twice)."""
    eve = tmp_path / "eve.json"
    eve.write_bytes(b'{"n": 1}\n{"n": 2}\n')
    saved = []
    first = EveTail(eve, None, 1000, 1 << 20, saved.append).read()
    with open(eve, "ab") as more:
        more.write(b'{"n": 3}\n')
    again_tail = EveTail(eve, saved[-1], 1000, 1 << 20, saved.append)
    again = again_tail.read()
    assert (again.lines, again.key) == (first.lines, first.key)
    again_tail.advance(again.position)
    assert "until" not in again.position
    assert again_tail.read().lines == [b'{"n": 3}']


def test_backoff_honours_retry_after_and_jitters_within_its_cap():
    backoff = Backoff(cap_seconds=30)
    assert 7 <= backoff.failed(retry_after=7) <= 8
    waits = [backoff.failed() for _ in range(20)]
    assert all(0 <= wait <= 30 for wait in waits) and len(set(waits)) > 10
    backoff.succeeded()
    assert backoff.failures == 0


def ids_payload(*raws: str) -> dict:
    return {"version": "20200616", "rule_count": len(raws),
            "rules": [{"sid": 9000000 + n, "raw": raw} for n, raw in enumerate(raws)]}


def firewall_payload(*addresses: str) -> dict:
    return {"version": "20200616", "entry_count": len(addresses), "truncated": False,
            "entries": [{"address": address, "family": 6 if ":" in address else 4,
                         "reasons": ["alert"]} for address in addresses]}


def recorder(tmp_path: Path, name: str, fail_when: str = "") -> tuple[str, ...]:
    """A command that records its calls in tmp_path/calls, and fails while tmp_path/`fail_when`
    exists."""
    script = (f'echo {name} >> {tmp_path}/calls; '
              f'if [ -e "{tmp_path}/{fail_when or "never"}" ]; then echo "{name} failed: '
              f'line 3 is broken" >&2; exit 1; fi')
    return ("sh", "-c", script)


async def test_rules_are_written_tested_reloaded_reported_and_restored_on_failure(
        client, settings, sql, tmp_path):
    config = config_for(tmp_path, url_of(client),
                        test_command=recorder(tmp_path, "test", "test-fails"),
                        reload_command=recorder(tmp_path, "reload"),
                        firewall_test_command=recorder(tmp_path, "nft-check"),
                        firewall_reload_command=recorder(tmp_path, "nft-load"))
    assert (await run_round(config))[0] == 0  # registers; the fleet's (empty) list applied
    assert (tmp_path / "calls").read_text().split() == ["nft-check", "nft-load"]
    (tmp_path / "calls").unlink()
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, {
            "ids": ids_payload('alert tcp any any -> any 22 (msg:"one"; sid:9000000;)'),
            "firewall": firewall_payload("45.33.32.156", "2001:db8::1")})
    assert (await run_round(config))[0] == 0
    assert config.rules_file.read_text().splitlines()[1:] == [
        'alert tcp any any -> any 22 (msg:"one"; sid:9000000;)']
    assert config.firewall_file.read_text().splitlines()[1:] == [
        "flush set inet filter router_backend_block_v4",
        "add element inet filter router_backend_block_v4 { 45.33.32.156 }",
        "flush set inet filter router_backend_block_v6",
        "add element inet filter router_backend_block_v6 { 2001:db8::1 }"]
    assert (tmp_path / "calls").read_text().split() == ["test", "reload", "nft-check",
                                                        "nft-load"]
    assert sql.rows("SELECT ok FROM router_applied") == [(True,)]
    current = await client.get("/rules/ids", headers={"X-ID": MAC})
    assert status(config)["applied"]["ids"]["etag"] == current.headers["ETag"]
    assert (await run_round(config))[0] == 0  # nothing new: nothing fetched or run
    assert len((tmp_path / "calls").read_text().split()) == 4

    (tmp_path / "test-fails").touch()
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, {"ids": ids_payload("alert ip any any -> any any "
                                                                 "(sid:9000001;)")})
    assert (await run_round(config))[0] == 0  # reported, not an error of the agent
    assert "sid:9000000" in config.rules_file.read_text()  # the previous file is back
    ok, detail, ids_etag = sql.rows("SELECT ok, detail, ids_etag FROM router_applied")[0]
    assert not ok and "test command exited 1: test failed: line 3 is broken" in detail
    assert ids_etag in current.headers["ETag"]  # still the one applied
    calls = (tmp_path / "calls").read_text().split()
    assert calls[4:] == ["test", "reload"]  # tested, then the previous one reloaded
    assert (await run_round(config))[0] == 0  # the failed payload is not tried again
    assert len((tmp_path / "calls").read_text().split()) == 6


def fleet_entry(address: str) -> dict:
    return {"address": address, "routers": 8, "networks": 8, "alerts": 96, "severity": 2,
            "signatures": [2010935], "first_seen": "2026-11-26T01:00:00Z",
            "last_seen": "2026-11-26T02:00:00Z", "expires_at": "2026-11-27T03:00:00Z",
            "reporters": []}


async def fleet_served(client, entries: int) -> None:
    """Wait until the server's fleet document holds `entries` entries (a loaded machine
    delivers the change's notification in its own time)."""
    fleet = client.app[FLEET_LIST].whole
    await wait_for(lambda: _holds(fleet, entries), timeout=10, interval=0.05)


async def _holds(fleet, entries: int) -> bool:
    return (await fleet.served(MAC)).entries == entries


async def test_the_fleet_list_is_applied_beside_the_router_own_with_the_same_fallback(
        make_client, database, tmp_path):
    # The fleet job would replace the lists below with its own count (none): at a tick,
    # or at start for one missed since the database was made (the suite's template).
    settings = settings_for(database, tmp_path, FLEET_CRON_SCHEDULE="0 0 1 1 *")
    client = await make_client(settings)
    config = config_for(tmp_path, url_of(client),
                        firewall_test_command=recorder(tmp_path, "nft-check", "check-fails"),
                        firewall_reload_command=recorder(tmp_path, "nft-load"))
    async with open_database(settings) as db:
        await fleet_db.replace(db, [fleet_entry("45.33.32.156"), fleet_entry("2a00:1450::1")],
                               [])
    await fleet_served(client, entries=2)  # the notification has reached the server
    assert (await run_round(config))[0] == 0
    fleet_file = config.fleet_path
    assert fleet_file.name == "block-fleet.nft" and not config.firewall_file.exists()
    assert fleet_file.read_text().splitlines()[1:] == [
        "flush set inet filter router_backend_fleet_v4",
        "add element inet filter router_backend_fleet_v4 { 45.33.32.156 }",
        "flush set inet filter router_backend_fleet_v6",
        "add element inet filter router_backend_fleet_v6 { 2a00:1450::1 }"]
    calls = (tmp_path / "calls").read_text().split()
    assert calls == ["nft-check", "nft-load"]
    assert (await run_round(config))[0] == 0  # the same ETag: nothing fetched or run
    assert (tmp_path / "calls").read_text().split() == calls
    (tmp_path / "check-fails").touch()  # a list the router cannot load: the last one stays
    async with open_database(settings) as db:
        await fleet_db.replace(db, [fleet_entry("45.33.32.157")], [])
    await fleet_served(client, entries=1)
    assert (await run_round(config))[0] == 0
    assert "45.33.32.156" in fleet_file.read_text()
    assert "fleet" in status(config)["failed"]


@pytest.mark.parametrize("payloads", [
    {"firewall": firewall_payload("1.2.3.4 }; flush ruleset; add element x { 5.6.7.8")},
    {"ids": ids_payload('alert ip any any -> any any (sid:1;)\ninclude "/etc/shadow"')}])
async def test_a_payload_that_would_smuggle_commands_never_reaches_a_file(
        client, settings, sql, tmp_path, payloads):
    config = config_for(tmp_path, url_of(client))
    assert (await run_round(config))[0] == 0
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, payloads)
    assert (await run_round(config))[0] == 0
    assert not config.firewall_file.exists() and not config.rules_file.exists()
    assert sql.rows("SELECT ok FROM router_applied") == [(False,)]


def test_the_example_configuration_loads_and_mistakes_are_named(tmp_path):
    example = REPOSITORY / "agent" / "router-agent.example.ini"
    config = load_config(example)
    assert config.command("test_command")[-1] == "/etc/suricata/rules/router-backend.rules"
    assert config.flow_types == ("flow", "netflow") and config.upload_seconds == 10
    broken = tmp_path / "broken.ini"
    broken.write_text(example.read_text().replace("poll_seconds", "poll_secs"))
    with pytest.raises(ConfigError, match="unknown options: poll_secs"):
        load_config(broken)
    broken.write_text("[agent]\nmac = aa:bb:cc:00:00:01\n")
    with pytest.raises(ConfigError, match="missing options: server_url"):
        load_config(broken)


def test_the_agent_runs_on_the_standard_library_alone(tmp_path):
    """`python -S` leaves out site-packages: only the standard library is importable."""
    code = ("import agent.cli, agent.rules, agent.uploads, agent.enrollment; "
            "assert 'aiohttp' not in __import__('sys').modules")
    done = subprocess.run([sys.executable, "-S", "-c", code], cwd=REPOSITORY,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def command_config(tmp_path: Path, option: str) -> Path:
    """A configuration file for the `router-agent` command, its server unreachable, and an
    eve.json of 50 real lines; `option` one more `name = value` line."""
    config_file = tmp_path / "agent.ini"
    config_file.write_text(f"[agent]\nserver_url = {closed_port_url()}\nmac = {MAC}\n"
                           f"state_dir = {tmp_path}/state\neve_json = {tmp_path}/eve.json\n"
                           f"rules_file = {tmp_path}/r.rules\nfirewall_file = {tmp_path}/b.nft\n"
                           f"start_delay_max_seconds = 0\n{option}\n")
    append(tmp_path / "eve.json", eve_lines()[:50])
    return config_file


def test_the_command_runs_once_and_prints_its_status(tmp_path):
    config_file = command_config(tmp_path, "timeout_seconds = 2")
    script = Path(sys.executable).parent / "router-agent"  # the console script pip installed
    agent_command = [str(script), "--config", str(config_file)]
    once = subprocess.run(agent_command + ["run", "--once"], capture_output=True, text=True,
                          timeout=60)
    assert once.returncode == EX_TEMPFAIL, once.stderr
    assert "server unavailable" in once.stderr
    shown = subprocess.run(agent_command + ["status"], capture_output=True, text=True,
                           timeout=60)
    report = json.loads(shown.stdout)
    assert report["spool"]["records"] == sum(counts_by_type(eve_lines()[:50]).values())
    spooled = sorted((tmp_path / "state" / "spool").iterdir())
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in spooled)
    assert gzip.decompress(spooled[0].read_bytes()).count(b"\n") > 0


async def test_a_captive_portal_in_between_is_unavailable_and_the_spool_waits(
        aiohttp_server, tmp_path):
    """A hotel's or a carrier's portal answers every request 200 with its own HTML page:
    nothing is taken as stored, nothing is written as rules."""
    async def portal(request):
        return web.Response(text="<html>Please sign in</html>", content_type="text/html")
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", portal)
    server = await aiohttp_server(app)
    config = config_for(tmp_path, f"http://127.0.0.1:{server.port}")
    append(config.eve_json, eve_lines()[:100])
    code, _ = await run_round(config)
    assert code == EX_TEMPFAIL and status(config)["spool"]["records"] > 0
    assert "not a JSON object" in status(config)["last_error"]["error"]
    assert not config.rules_file.exists() and status(config)["counters"]["batches_sent"] == 0


def test_the_agent_runs_until_sigterm_and_stops_cleanly(tmp_path):
    config_file = command_config(tmp_path, "upload_seconds = 0.2")
    script = Path(sys.executable).parent / "router-agent"
    agent = subprocess.Popen([str(script), "--config", str(config_file), "run"],
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not list((tmp_path / "state" / "spool").glob("*.gz")) and time.monotonic() < deadline:
        time.sleep(0.1)
    agent.terminate()
    _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 0 and "stopped" in stderr and "Traceback" not in stderr
    assert status(load_config(config_file))["spool"]["records"] > 0  # kept for the next run


async def test_a_stale_304_from_a_lagging_etag_cache_does_not_pin_the_old_payload(
        client, settings, tmp_path):
    """The service's ETag cache may hold an old ETag while /rules/last_updated (read from the
    database) has moved: a poll then gets a 304 for the old payload. CI runs of the agent
    drill left an agent on its old payload that way. The agent asks again without
    If-None-Match, which the service answers from its database."""
    config = config_for(tmp_path, url_of(client))
    assert (await run_round(config))[0] == 0  # registered
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, {"ids": ids_payload("alert ip any any -> any any "
                                                                 "(sid:1;)"),
                                              "firewall": firewall_payload()})
    assert (await run_round(config))[0] == 0
    old = status(config)["applied"]["ids"]["etag"]
    cache = client.server.app[ETAG_CACHE]
    async with open_database(settings) as db:
        await store_payload_objects(db, MAC, {"ids": ids_payload("alert ip any any -> any any "
                                                                 "(sid:2;)")})

    async def notified():
        return cache.etag(MAC, "ids") is None
    await wait_for(notified, timeout=10, interval=0.05)
    cache.remember(MAC, "ids", old.removeprefix("W/").strip('"'), cache.token())  # stale
    assert (await run_round(config))[0] == 0
    current = await client.get("/rules/ids", headers={"X-ID": MAC})
    assert status(config)["applied"]["ids"]["etag"] == current.headers["ETag"] != old
    assert "sid:2" in config.rules_file.read_text()


async def test_the_intel_document_is_installed_updated_by_delta_and_put_back_on_failure(
        make_client, database, tmp_path):
    settings = settings_for(database, tmp_path, FLEET_CRON_SCHEDULE="0 0 1 1 *")
    client = await make_client(settings)
    config = config_for(tmp_path, url_of(client),
                        test_command=recorder(tmp_path, "suricata-test", "test-fails"),
                        reload_command=recorder(tmp_path, "suricata-reload"),
                        firewall_test_command=recorder(tmp_path, "nft-check"),
                        firewall_reload_command=recorder(tmp_path, "nft-load"))
    intel_list = client.app[INTEL_LIST].for_router(None)  # the agent's default capacity
    async with open_database(settings) as db:
        await intel_db.add_feed(db, "test-feed", None, "plain", None, 50, "test")
        feed = (await intel_db.feeds(db, "test-feed"))[0]
        await import_file(db, feed, KEPT_DOMAINS + b"c2.bad.example\n45.33.32.66\n185.220.0.0/16\n", "test")
        await judge_and_tell(db, IntelConfig.from_settings(settings), "test")  # delivered
    await wait_for(lambda: _intel_holds(intel_list, 33), timeout=10, interval=0.05)
    assert (await run_round(config))[0] == 0
    rules_dir = config.rules_file.parent
    assert (rules_dir / "rb-intel-domains.lst").read_text().splitlines() == \
        _encoded(KEPT_DOMAINS + b"c2.bad.example")
    assert (rules_dir / "rb-intel-ip.lst").read_text() == "45.33.32.66\n"
    assert "dataset:isset,rb-intel-domains" in (rules_dir / "rb-intel.rules").read_text()
    assert (rules_dir / "rb-intel-block.nft").read_text().splitlines()[1:3] == [
        "flush set inet filter router_backend_intel_v4",
        "add element inet filter router_backend_intel_v4 { 185.220.0.0/16, 45.33.32.66 }"]
    assert (tmp_path / "calls").read_text().split()[-4:] == [
        "suricata-test", "suricata-reload", "nft-check", "nft-load"]

    async with open_database(settings) as db:  # the next version: one gone, one new
        await import_file(db, feed, KEPT_DOMAINS + b"c2.bad.example\nnew.bad.example\n185.220.0.0/16\n",
                          "test")
        await judge_and_tell(db, IntelConfig.from_settings(settings), "test")  # delivered
    await wait_for(lambda: _intel_holds(intel_list, 33, base64.b64encode(
        b"new.bad.example").decode()), timeout=10, interval=0.05)
    assert (await run_round(config))[0] == 0
    assert status(config)["applied"]["intel"]["delta"] is True  # only what changed came
    assert (rules_dir / "rb-intel-domains.lst").read_text().splitlines() == _encoded(
        KEPT_DOMAINS + b"c2.bad.example\nnew.bad.example")
    assert not (rules_dir / "rb-intel-ip.lst").exists()

    (tmp_path / "test-fails").touch()  # Suricata refuses the next one: the last stays
    async with open_database(settings) as db:
        await import_file(db, feed, KEPT_DOMAINS + b"other.bad.example\n", "test")
        await judge_and_tell(db, IntelConfig.from_settings(settings), "test")  # delivered
    await wait_for(lambda: _intel_holds(intel_list, 31), timeout=10, interval=0.05)
    assert (await run_round(config))[0] == 0
    assert len((rules_dir / "rb-intel-domains.lst").read_text().splitlines()) == 32
    assert "intel" in status(config)["failed"]

    # A delta that does not apply (the document kept holds a block entry that is no
    # network): the whole document is asked and applied at once, not the version failed.
    (tmp_path / "test-fails").unlink()
    kept_path = config.state_dir / "intel.json"
    kept = json.loads(kept_path.read_text())
    kept["block"].append({"address": "not-a-network", "expires_at": None})
    kept_path.write_text(json.dumps(kept))
    async with open_database(settings) as db:
        await import_file(db, feed, KEPT_DOMAINS + b"other.bad.example\nlast.bad.example\n",
                          "test")
        await judge_and_tell(db, IntelConfig.from_settings(settings), "test")  # delivered
    await wait_for(lambda: _intel_holds(intel_list, 32), timeout=10, interval=0.05)
    assert (await run_round(config))[0] == 0
    assert status(config)["applied"]["intel"]["delta"] is False
    assert "intel" not in status(config)["failed"]
    assert len((rules_dir / "rb-intel-domains.lst").read_text().splitlines()) == 32


def _encoded(names: bytes) -> list[str]:
    """A domains file's lines for `names` (one a line): base64, sorted."""
    return sorted(base64.b64encode(name).decode() for name in names.split())


async def _intel_holds(intel_list, entries: int, text: str = "") -> bool:
    served = await intel_list.served(MAC)
    return served.entries == entries and text.encode() in gzip.decompress(served.packed) \
        if text else served.entries == entries
