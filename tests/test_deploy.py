"""The deployment files under ops/deploy/ are sound as far as this machine can check: systemd
accepts the unit, the compose file is wired to the documented variables, and the Dockerfile
copies what the package needs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from server.exposure import unchosen
from server.settings import load_settings
from testkit.server import free_port, http_get, running_server, wait_listening

DEPLOY = Path(__file__).resolve().parents[1] / "ops" / "deploy"
ROOT = DEPLOY.parents[1]


def test_systemd_unit_restarts_on_failure_and_starts_at_boot():
    unit = (DEPLOY / "router-backend.service").read_text()
    assert re.search(r"^Restart=on-failure$", unit, re.M)
    assert re.search(r"^WantedBy=multi-user\.target$", unit, re.M)
    assert re.search(r"^ExecStart=\S+/router-backend serve$", unit, re.M)


def test_deployment_defaults_leak_nothing():
    """Issue 27, finding 8: Caddy's admin API on localhost:2019 showed the notification
    token; compose defaulted POSTGRES_PASSWORD to `change-me` and the token to empty, and set
    no TRUSTED_PROXIES (every client looked like Caddy); the unit set no UMask."""
    unit = (DEPLOY / "router-backend.service").read_text()
    assert re.search(r"^UMask=0077$", unit, re.M)
    assert re.search(r"^\s*admin \{\$CADDY_ADMIN:off\}$", (DEPLOY / "Caddyfile").read_text(),
                     re.M)
    compose_text = (DEPLOY / "compose.yaml").read_text()
    assert "change-me" not in compose_text
    for secret in ("POSTGRES_PASSWORD", "NOTIFICATION_API_TOKEN"):
        assert "${" + secret + ":-" not in compose_text and "${" + secret + ":?" in compose_text
    services = yaml.safe_load(compose_text)["services"]
    caddy_address = services["caddy"]["networks"]["edge"]["ipv4_address"]
    assert services["app"]["environment"]["TRUSTED_PROXIES"] == f"{caddy_address}/32"
    assert "edge" in services["app"]["networks"]


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart exists; point it at a binary this machine has.
    unit = (DEPLOY / "router-backend.service").read_text()
    local = tmp_path / "router-backend.service"
    local.write_text(re.sub(r"^ExecStart=\S+", "ExecStart=/bin/true", unit, flags=re.M))
    result = subprocess.run(["systemd-analyze", "verify", str(local)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "router-backend.service" not in result.stderr, result.stderr


def test_compose_is_wired_to_the_host_paths():
    compose_text = (DEPLOY / "compose.yaml").read_text()
    compose = yaml.safe_load(compose_text)
    for variable in ("HOST_RULE_DATA_DIR", "POSTGRES_INIT_SQL_PATH", "POSTGRES_DATA_PATH",
                     "CADDY_DATA_PATH", "CADDY_CONFIG_PATH"):
        assert "${" + variable in compose_text, variable
    services = compose["services"]
    assert set(services) == {"db", "app", "caddy"}
    build = services["app"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == \
        (DEPLOY / "Dockerfile").resolve()
    assert any(v.endswith(":/docker-entrypoint-initdb.d:ro") for v in services["db"]["volumes"])
    assert "./Caddyfile:/etc/caddy/Caddyfile:ro" in services["caddy"]["volumes"]


def test_dockerfile_copies_every_package():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) ", dockerfile, re.M))
    for package in ("server", "engine", "ruledata", "migrations", "ops"):
        assert package in copied and (ROOT / package).is_dir()
    assert re.search(r'^CMD \["router-backend", "serve"\]$', dockerfile, re.M)


def test_caddyfile_proxies_to_the_service_with_a_valid_health_probe():
    caddyfile = (DEPLOY / "Caddyfile").read_text()
    assert "reverse_proxy {$UPSTREAM:127.0.0.1:8080}" in caddyfile
    assert caddyfile.count("{") == caddyfile.count("}")
    assert re.search(r"X-ID 00:00:00:00:00:00", caddyfile)


@contextlib.contextmanager
def caddy_in_front(upstream_port: int, workdir: Path, **env: str):
    """The shipped Caddyfile run by a real Caddy on loopback (plain HTTP), in front of the
    service on `upstream_port`; yields its base URL."""
    port, admin = free_port(), free_port()
    process = subprocess.Popen(
        ["caddy", "run", "--adapter", "caddyfile", "--config", str(DEPLOY / "Caddyfile")],
        env={**os.environ, "PUBLIC_ADDRESS": f"http://127.0.0.1:{port}",
             "UPSTREAM": f"127.0.0.1:{upstream_port}", "CADDY_ADMIN": f"127.0.0.1:{admin}",
             "XDG_DATA_HOME": str(workdir / "caddy-data"),
             "XDG_CONFIG_HOME": str(workdir / "caddy-config"), **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_listening(process, port, timeout=20), "caddy did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.drill  # Caddy in front
@pytest.mark.skipif(shutil.which("caddy") is None, reason="caddy is not installed")
def test_caddy_exposes_the_notification_api_only_with_a_token(database, tmp_path):
    """Issue 12: with the defaults, anyone reaching the public address could send mail and
    read any feed through /api/. Caddy now hides /api/ unless the token is set (and the
    service then requires it); /metrics is never proxied."""
    feed = "/api/workflow/users/nobody/notifications"
    with running_server(database, tmp_path, RULE_GENERATION_ENABLED="false") as server:
        with caddy_in_front(server.port, tmp_path) as public:
            assert http_get(public + feed) == (404, b"")  # Caddy's own answer: not proxied
            assert http_get(public + "/metrics")[0] == 404
            status, body = http_get(public + "/health", **{"X-ID": "aa:bb:cc:00:12:50"})
            assert status == 200 and b'"ok"' in body
        assert http_get(server.url + "/metrics")[0] == 200  # a local scraper, no proxy
    token = "api-token-0123456789"
    with running_server(database, tmp_path, RULE_GENERATION_ENABLED="false",
                        NOTIFICATION_API_TOKEN=token) as server:
        with caddy_in_front(server.port, tmp_path, NOTIFICATION_API_TOKEN=token) as public:
            status, body = http_get(public + feed)
            assert status == 401 and b"bearer token" in body  # the service's answer
            status, body = http_get(public + feed, Authorization=f"Bearer {token}")
            assert status == 404 and b"no notifications" in body


def shipped_container_environment() -> dict[str, str]:
    """The app container's settings as shipped: the Dockerfile's ENV, then compose's
    environment (its required variables filled in)."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    block = re.search(r"^ENV (.*?)(?=^\S)", dockerfile, re.M | re.S).group(1)
    environment = dict(re.findall(r"(\w+)=(\S+)", block.replace("\\\n", " ")))
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    for name, value in compose["services"]["app"]["environment"].items():
        environment[name] = re.sub(r"\$\{\w+:\?[^}]*\}", "0123456789abcdef-" + name, str(value))
    return environment


def test_the_shipped_deployments_choose_every_exposure():
    """Issue 44: the image listens on every address of its container, so it must start as
    shipped with each exposure chosen, and safely: router keys with enrollment, a token, the
    console on a private listener. The unit listens on loopback behind Caddy, and chooses the
    same; Caddy hides the console."""
    shipped = shipped_container_environment()
    settings = load_settings({**shipped, "DB_HOST": "db"}, env_file=None)
    assert unchosen(settings) == []
    assert settings.router_auth == "key" and settings.enrollment_token
    assert settings.notification_api_token and settings.console_listen[0] == "127.0.0.1"
    unit = (DEPLOY / "router-backend.service").read_text()
    for line in ("Environment=ROUTER_AUTH=key", "Environment=CONSOLE_LISTEN=127.0.0.1:8081",
                 "Environment=TRUSTED_PROXIES=127.0.0.1/32,::1/128"):
        assert re.search(rf"^{re.escape(line)}$", unit, re.M), line
    assert re.search(r"^\s*respond /console\* 404$", (DEPLOY / "Caddyfile").read_text(), re.M)


@pytest.mark.drill  # Caddy in front
@pytest.mark.skipif(shutil.which("caddy") is None, reason="caddy is not installed")
def test_the_shipped_configuration_serves_routers_with_keys_through_caddy(database, tmp_path):
    """The image's and compose's settings (docker itself is not on this machine: the
    service runs them as a process, on 0.0.0.0 reached on loopback) behind the shipped
    Caddyfile: a router enrolls and polls with its key through Caddy; without it, 401; the
    console is 404 through Caddy and on the public address, and served on its listener."""
    shipped = shipped_container_environment()
    console_port = free_port()
    keep = {name: value for name, value in shipped.items() if name in (
        "LISTEN_HOST", "ROUTER_AUTH", "ENROLLMENT_TOKEN", "NOTIFICATION_API_TOKEN")}
    with running_server(database, tmp_path, RULE_GENERATION_ENABLED="false",
                        CONSOLE_LISTEN=f"127.0.0.1:{console_port}", **keep) as server:
        with caddy_in_front(server.port, tmp_path,
                            NOTIFICATION_API_TOKEN=keep["NOTIFICATION_API_TOKEN"]) as public:
            mac = "aa:bb:cc:00:44:10"
            request = urllib.request.Request(public + "/enroll", method="POST", headers={
                "X-ID": mac, "Authorization": f"Bearer {keep['ENROLLMENT_TOKEN']}"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 201
                key = json.loads(answer.read())["key"]
            assert http_get(public + "/rules/last_updated", **{
                "X-ID": mac, "Authorization": f"Bearer {key}"})[0] == 200
            assert http_get(public + "/rules/last_updated", **{"X-ID": mac})[0] == 401
            assert http_get(public + "/console/sign-in")[0] == 404
        assert http_get(f"http://127.0.0.2:{server.port}/console/sign-in")[0] == 404
        assert http_get(f"http://127.0.0.1:{console_port}/console/sign-in")[0] == 200


ALERTS = DEPLOY / "prometheus-alerts.yml"
DASHBOARD = DEPLOY / "grafana-dashboard.json"
PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "rate", "increase", "irate", "time",
                "histogram_quantile", "clamp_min", "label_replace", "absent", "and", "or",
                "unless", "by", "on", "without", "ignoring", "bool", "offset", "max_over_time"}
PROMETHEUS_OWN = {"up"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    expr = re.sub(r'"[^"]*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    return set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*", expr)) - PROMQL_WORDS


def alert_expressions() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


async def exported_metric_names(client) -> set[str]:
    text = await (await client.get("/metrics")).text()
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix
                  for suffix in ("", "_total", "_bucket", "_sum", "_count", "_created")}
    return names


async def test_alerts_and_dashboard_name_only_metrics_the_service_exports(client):
    exported = await exported_metric_names(client) | PROMETHEUS_OWN
    expressions = alert_expressions() + dashboard_expressions()
    assert len(alert_expressions()) >= 8 and len(dashboard_expressions()) >= 10
    unknown = {name for expr in expressions for name in metric_names(expr)} - exported
    assert not unknown, f"not exported by the service: {sorted(unknown)}"
    # The check itself catches a name the service does not export.
    assert metric_names('sum(rate(bogus_requests_total{a="b"}[5m])) by (le)') == {
        "bogus_requests_total"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_alert_rules():
    result = subprocess.run(["promtool", "check", "rules", str(ALERTS)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
