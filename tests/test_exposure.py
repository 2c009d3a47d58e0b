"""Fail closed on a public address (issue 44): a listener that is not loopback starts only
when each exposure there was chosen; loopback keeps README's zero-configuration first run.
Non-loopback listeners are 0.0.0.0 reached on loopback, never an address off this host."""

from __future__ import annotations

import subprocess
import sys

import pytest

from server.exposure import chosen_risks, refuse_unchosen, unchosen
from server.settings import SettingsError, load_settings
from testkit import REPOSITORY
from testkit.server import ServerRunner, free_port, http_get

TOKEN = "t" * 16


def settings(**environ: str):
    return load_settings(environ, env_file=None)


def test_loopback_needs_no_choice():
    assert unchosen(settings()) == []
    assert unchosen(settings(LISTEN_HOST="::1")) == []
    assert chosen_risks(settings()) == []


def test_a_public_listener_needs_every_exposure_chosen():
    missing = unchosen(settings(LISTEN_HOST="0.0.0.0"))
    assert [m.split(" ")[0] for m in missing] == ["ROUTER_AUTH", "NOTIFICATION_API_TOKEN",
                                                  "CONSOLE_LISTEN"]
    # The default value, written out, is a choice; so are the API off and the console off.
    assert unchosen(settings(LISTEN_HOST="0.0.0.0", ROUTER_AUTH="mac", SERVICES="router",
                             CONSOLE="false")) == []
    assert unchosen(settings(LISTEN_HOST="203.0.113.5", ROUTER_AUTH="key",
                             NOTIFICATION_API_TOKEN=TOKEN,
                             CONSOLE_LISTEN="127.0.0.1:8081")) == []
    assert unchosen(settings(LISTEN_HOST="0.0.0.0", ROUTER_AUTH="key", SERVICES="router",
                             CONSOLE_LISTEN="10.1.2.3:8081")) == []
    # A console listener on a public address is no private one; a host name may be anything.
    assert len(unchosen(settings(LISTEN_HOST="routers.example.net", ROUTER_AUTH="key",
                                 SERVICES="router", CONSOLE_LISTEN="0.0.0.0:8081"))) == 1


def test_chosen_risks_are_warned():
    risks = chosen_risks(settings(LISTEN_HOST="0.0.0.0", ROUTER_AUTH="mac", CONSOLE="true",
                                  NOTIFICATION_API_TOKEN=TOKEN))
    assert len(risks) == 3 and "ROUTER_AUTH=mac" in risks[0] and "TLS" in risks[1]
    assert "SERVICE_ADDRESSES" in risks[2]  # the fleet could list the service's own address
    assert len(chosen_risks(settings(LISTEN_HOST="0.0.0.0", ROUTER_AUTH="mac", CONSOLE="true",
                                     NOTIFICATION_API_TOKEN=TOKEN,
                                     SERVICE_ADDRESSES="198.51.100.7"))) == 2


def test_a_console_listener_is_judged_whatever_listen_host_is():
    """Issue 50: with a loopback LISTEN_HOST, CONSOLE_LISTEN=0.0.0.0:P started unrefused."""
    for host in ("0.0.0.0", "[::]", "203.0.113.5", "console.example.net"):
        missing = unchosen(settings(LISTEN_HOST="127.0.0.1", CONSOLE_LISTEN=f"{host}:8081"))
        assert len(missing) == 1 and missing[0].startswith("CONSOLE_LISTEN"), host
        with pytest.raises(SettingsError, match="CONSOLE_LISTEN"):
            refuse_unchosen(settings(LISTEN_HOST="127.0.0.1", CONSOLE_LISTEN=f"{host}:8081"))
    assert unchosen(settings(LISTEN_HOST="127.0.0.1", CONSOLE_LISTEN="0.0.0.0:8081",
                             CONSOLE="true")) == []
    for private in ("127.0.0.1", "10.1.2.3", "192.168.1.1", "[fd00::1]", "[::1]"):
        assert unchosen(settings(LISTEN_HOST="127.0.0.1",
                                 CONSOLE_LISTEN=f"{private}:8081")) == [], private


def serve(tmp_path, **environ: str) -> subprocess.CompletedProcess:
    runner = ServerRunner(None, tmp_path, **environ)
    env = {name: value for name, value in runner.env.items()
           if name not in ("ROUTER_AUTH", "NOTIFICATION_API_TOKEN", "CONSOLE")}
    env.update(environ)
    return subprocess.run([sys.executable, "-m", "ops", "serve"], env=env, cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=60)


def test_a_public_start_with_defaults_is_refused_with_one_line(tmp_path):
    refused = serve(tmp_path, LISTEN_HOST="0.0.0.0")
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "router-backend: LISTEN_HOST 0.0.0.0 is not loopback")
    for name in ("ROUTER_AUTH", "NOTIFICATION_API_TOKEN", "CONSOLE_LISTEN"):
        assert name in lines[0]
    assert not (tmp_path / "postgres").exists()  # nothing was started


def test_a_public_start_with_the_safe_choices_serves_and_hides_the_console(tmp_path):
    server = ServerRunner(None, tmp_path, LISTEN_HOST="0.0.0.0", ROUTER_AUTH="key",
                          NOTIFICATION_API_TOKEN=TOKEN, CONSOLE_LISTEN=f"127.0.0.1:{free_port()}")
    server.start(timeout=120)
    try:
        public = f"http://127.0.0.2:{server.port}"
        assert http_get(public + "/console/sign-in")[0] == 404
        assert http_get(public + "/api/notifications?user=x")[0] == 401
    finally:
        server.stop()


def test_ipv6_spellings_of_loopback_and_private_addresses_are_not_taken_for_them():
    """Found by the hostile review of issue 50: NAT64 and IPv4-compatible addresses are
    other hosts' addresses, not this one's loopback or a private network."""
    for host in ("64:ff9b::7f00:1", "::7f00:1"):
        assert unchosen(settings(LISTEN_HOST=host)), host
    for host in ("[64:ff9b::a00:1]", "[::c0a8:101]"):
        assert unchosen(settings(LISTEN_HOST="127.0.0.1", CONSOLE_LISTEN=f"{host}:8081")), host
    assert unchosen(settings(LISTEN_HOST="::ffff:127.0.0.1")) == []  # a dual-stack spelling
