"""The deployment files under ops/deploy/ are sound as far as this machine can check: systemd
accepts the unit, the compose file is wired to the documented variables, and the Dockerfile
copies what the package needs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "ops" / "deploy"
ROOT = DEPLOY.parents[1]


def test_systemd_unit_restarts_on_failure_and_starts_at_boot():
    unit = (DEPLOY / "router-backend.service").read_text()
    assert re.search(r"^Restart=on-failure$", unit, re.M)
    assert re.search(r"^WantedBy=multi-user\.target$", unit, re.M)
    assert re.search(r"^ExecStart=\S+/router-backend serve$", unit, re.M)


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
