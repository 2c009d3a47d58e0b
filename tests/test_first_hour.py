"""The first hour (issue 54), as a newcomer meets it: the real service started the README's
way, then each friction of the report, each answered as the issue asks. And every command of
the command table given a bad argument: exit 2, one line, no traceback."""

from __future__ import annotations

import gzip
import subprocess
import sys
import urllib.request

import orjson
import pytest

from testkit import REPOSITORY
from testkit.server import ServerRunner
from tests.commands import router_backend

MAC = "aa:bb:cc:54:00:01"
EVE = (REPOSITORY / "tests" / "fixtures" / "eve-sample.ndjson").read_bytes()


def post(url: str, path: str, body: bytes, **headers: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}{path}", data=body, method="POST", headers={
        "X-ID": MAC, "Content-Type": "application/x-ndjson", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """The README's first command's service (embedded PostgreSQL), in key mode with an
    enrollment token and a fleet age of its own: what its commands must act with."""
    workdir = tmp_path_factory.mktemp("first-hour")
    server = ServerRunner(None, workdir, ROUTER_AUTH="mac",
                          FLEET_MIN_ROUTER_AGE_HOURS="7").start(timeout=120)
    yield server
    server.stop()


def command(service, *args: str, **env: str) -> subprocess.CompletedProcess:
    """A command as an operator types it beside the service: its own environment holds only
    DATA_DIR (the unit's EnvironmentFile is not in the operator's shell)."""
    own = {name: value for name, value in service.env.items()
           if name not in ("ROUTER_AUTH", "FLEET_MIN_ROUTER_AGE_HOURS")}
    return router_backend({**own, **env}, *args)


def test_commands_act_with_the_running_service_settings(service):
    shown = command(service, "fleet", "attackers", "--why", "198.51.100.1")
    assert shown.returncode == 0 and "warning" not in shown.stderr
    differing = command(service, "fleet", "attackers", FLEET_MIN_ROUTER_AGE_HOURS="0")
    assert differing.returncode == 0
    warning = [line for line in differing.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and "FLEET_MIN_ROUTER_AGE_HOURS=0 (service: 7)" in warning[0]


def test_gzip_without_its_header_is_decoded(service):
    status, answer = post(service.url, "/log/events", gzip.compress(EVE))
    assert status == 200 and answer["accepted"] > 0 and answer["rejected"] == 0


def test_newlines_lost_answer_422_with_a_hint(service):
    flattened = EVE.replace(b"\n", b" ")  # what `curl -d @file` sends
    status, answer = post(service.url, "/log/events", flattened)
    assert status == 422 and answer["accepted"] == 0
    assert "--data-binary" in answer["hint"] and answer["errors"]


def test_binary_that_is_not_json_answers_422(service):
    status, answer = post(service.url, "/log/events", b"\xff\xfe\x00garbage\n" * 3)
    assert status == 422 and "UTF-8" in answer["hint"]


def test_an_empty_body_answers_422(service):
    status, answer = post(service.url, "/log/cfm", b"")
    assert status == 422 and "no record" in answer["hint"]


def test_records_an_endpoint_does_not_read_are_counted_apart(service):
    flows = b"\n".join(line for line in EVE.splitlines()
                       if orjson.loads(line).get("event_type") == "flow") or (
        b'{"event_type": "flow", "src_ip": "10.0.0.1", "dest_ip": "10.0.0.2"}')
    stats = b'{"event_type": "stats", "stats": {"uptime": 10}}'
    status, answer = post(service.url, "/log/events", flows + b"\n" + stats)
    assert status == 200 and answer["accepted"] >= 2
    assert answer["unread"]["records"] == answer["accepted"]
    assert answer["unread"]["event_types"]["stats"] == 1
    assert "/log/cfm" in answer["unread"]["hint"]


def test_version_and_console_credential(service):
    version = command(service, "--version")
    assert version.returncode == 0 and version.stdout.startswith("router-backend ")
    piped = subprocess.run([sys.executable, "-m", "ops", "console", "credential", "ana",
                            "operator", "--password"], input="only-one-line-here-1234\n",
                           env={**service.env}, cwd=REPOSITORY, capture_output=True, text=True,
                           timeout=60)
    assert piped.returncode == 2 and "Traceback" not in piped.stderr
    assert len(piped.stderr.strip().splitlines()) == 1
    made = command(service, "console", "credential", "ana", "operator")
    assert made.returncode == 0 and "CONSOLE_USERS" in made.stdout


def test_a_taken_port_is_named_before_the_database_is_touched(service, tmp_path):
    second = ServerRunner(None, tmp_path / "second", LISTEN_PORT=str(service.port))
    done = subprocess.run([sys.executable, "-m", "ops", "serve"], env=second.env,
                          cwd=REPOSITORY, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "LISTEN_PORT" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "second" / "postgres").exists()  # no database was made


# Every command of the table with a bad argument: exit 2 and one line.
BAD_ARGUMENTS = [
    ("subscriptions", "add", "not-a-mac"), ("subscriptions", "remove", "zz:zz"),
    ("subscriptions", "rotate-key", "nope"), ("subscriptions", "reset", "nope"),
    ("allowlist", "add", "not-a-network"), ("allowlist", "add", "10.0.0.0/8", "--mac", "x"),
    ("rules", "disable", "2010935", "--mac", "nope"), ("rules", "disable", "re:("),
    ("intel", "suppress", "domain:org", "--note", "x"), ("intel", "add", "x", "--format", "no"),
    ("telemetry", "export", "--mac", "nope"), ("telemetry", "export", "--mac", MAC,
                                                "--match", "colour:blue"),
    ("hunt", "--ip", "300.1.1.1"), ("hunt",), ("fleet", "attackers", "--why", "nope"),
    ("status", "--nope"), ("migrate", "--down-to", "x"), ("retention", "--nope"),
    ("console", "credential", "bad name!", "support"), ("serve", "--workers", "0"),
    ("citus", "distribute", "--shard-count", "x"), ("backup", "--nope"),
    ("restore",), ("nope",),
]


@pytest.mark.parametrize("args", BAD_ARGUMENTS, ids=lambda args: " ".join(args))
def test_a_bad_argument_exits_2_with_one_line(service, args):
    done = command(service, *args)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines()
              if line.strip() and not line.startswith("usage:") and not line.startswith(" ")]
    assert len(errors) == 1, done.stderr


def test_rulegen_bad_mac_and_explain_summary_go_with_explain(service):
    bad = subprocess.run([sys.executable, "-m", "ops.rulegen", "--mac", "nope"],
                         env=service.env, cwd=REPOSITORY, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    alone = subprocess.run([sys.executable, "-m", "ops.rulegen", "--mac", MAC, "--summary"],
                           env=service.env, cwd=REPOSITORY, capture_output=True, text=True,
                           timeout=60)
    assert alone.returncode == 2 and "--summary goes with --explain" in alone.stderr


def test_status_says_the_service_answers(service):
    shown = command(service, "status")
    assert shown.returncode == 0
    assert shown.stdout.startswith(f"service        answering at http://127.0.0.1:{service.port}"
                                   "/health\n"), shown.stdout
    # A new user's finding: the JSON said "status": 401 for the service's own probe.
    answered = orjson.loads(command(service, "status", "--json").stdout)
    assert answered["service"]["status"] == 200, answered["service"]


def test_commands_say_the_truth_on_the_first_day(service, tmp_path):
    """Issue 62, item 5: a credential made before any start, a command run from another
    directory, an export of an unknown router."""
    fresh = {**service.env, "DATA_DIR": "var"}
    made = subprocess.run([sys.executable, "-m", "ops", "console", "credential", "ana",
                           "operator"], env=fresh, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0 and made.stderr == "", made.stderr
    assert "CONSOLE_USERS" in made.stdout and "single quotes" in made.stdout
    assert "CONSOLE_SECRET" in made.stdout and not (tmp_path / "var" / "postgres").exists()
    elsewhere = subprocess.run([sys.executable, "-m", "ops", "status"], env=fresh,
                               cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert elsewhere.returncode == 1
    assert f"no embedded database in {tmp_path / 'var' / 'postgres'}" in elsewhere.stderr
    assert f"from {tmp_path}" in elsewhere.stderr
    unknown = command(service, "telemetry", "export", "--mac", "02:00:00:62:00:99")
    assert unknown.returncode == 1 and "is not a router of this service" in unknown.stderr
