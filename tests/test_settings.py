"""Settings: defaults, parsing, `.env`, clear start-up errors, and the tables of
docs/settings.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ops import settings_doc
from server.settings import (
    SETTINGS,
    Settings,
    SettingsError,
    load_settings,
    read_env_file,
    unrecognised_settings,
)

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_build_settings():
    settings = load_settings({}, env_file=None)
    assert settings.listen_port == 8080 and settings.db_host is None
    assert settings.embedded_database
    assert settings.rule_generation_sample_count == 550
    assert settings.rule_generation_interval_seconds == 86400
    assert settings.data_retention_enabled is False and settings.retention_days == 30
    assert settings.rule_data_path == Path("var") / "ruledata"


def test_every_setting_is_a_field_and_every_field_a_setting():
    assert {s.attribute for s in SETTINGS} | {"chosen", "given"} == set(Settings.__dataclass_fields__)


@pytest.mark.parametrize("name,value,expected", [
    ("LISTEN_PORT", "eighty", "LISTEN_PORT"),
    ("LISTEN_PORT", "70000", "LISTEN_PORT"),
    ("RULE_PREPROCESS_CRON_SCHEDULE", "every sunday", "RULE_PREPROCESS_CRON_SCHEDULE"),
    ("RETENTION_CRON_SCHEDULE", "61 * * * *", "RETENTION_CRON_SCHEDULE"),
    ("DATA_RETENTION_ENABLED", "maybe", "DATA_RETENTION_ENABLED"),
    ("DB_LOG_LEVEL", "loud", "DB_LOG_LEVEL"),
    ("REGISTRATION_MODE", "ajar", "REGISTRATION_MODE"),
    ("RULE_GENERATION_SAMPLE_COUNT", "0", "RULE_GENERATION_SAMPLE_COUNT"),
])
def test_bad_values_name_the_variable(name, value, expected):
    with pytest.raises(SettingsError, match=expected):
        load_settings({name: value}, env_file=None)


def test_env_file_under_environment(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("# comment\nexport LISTEN_PORT=9001\nDB_NAME='fleet db'\n"
                        'RETENTION_DAYS="7"\n')
    settings = load_settings({"RETENTION_DAYS": "9"}, env_file=env_file)
    assert (settings.listen_port, settings.db_name, settings.retention_days) == (9001, "fleet db", 9)


def test_malformed_env_file_line(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("JUSTANAME\n")
    with pytest.raises(SettingsError, match=".env:1"):
        load_settings({}, env_file=env_file)


def test_bad_setting_stops_startup_with_one_line(tmp_path):
    env = {**os.environ, "RULE_PREPROCESS_CRON_SCHEDULE": "not cron", "DATA_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "ops.cli", "serve"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60,
                            )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "RULE_PREPROCESS_CRON_SCHEDULE" in lines[0]


def test_unrecognised_names_are_warned_with_the_closest_setting(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("RETENTION_DAYS=5\nLISTEN_PROT=9000\nSOMETHING_ELSE=1\n")
    environ = {"RETENTON_DAYS": "5", "DB_HOTS": "db", "SMTP_HOST": "mail", "PATH": "/bin",
               "HTTP_PROXY": "http://proxy", "TEST_DB_HOST": "x"}
    assert unrecognised_settings(environ, env_file) == [
        "DB_HOTS (in the environment) is no setting of this service and is ignored; did you "
        "mean DB_HOST?",
        f"LISTEN_PROT (in {env_file}) is no setting of this service and is ignored; did you "
        "mean LISTEN_PORT?",
        "RETENTON_DAYS (in the environment) is no setting of this service and is ignored; "
        "did you mean RETENTION_DAYS?",
        f"SOMETHING_ELSE (in {env_file}) is no setting of this service and is ignored"]


def test_a_misspelled_setting_is_reported_at_start_up(tmp_path):
    """The service's own start (and any operator command) says so, once, on stderr."""
    env = {**os.environ, "RETENTON_DAYS": "5", "DATA_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "ops", "status"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.stderr.count("RETENTON_DAYS") == 1
    assert "did you mean RETENTION_DAYS?" in result.stderr


def test_settings_page_tables_are_current():
    page = settings_doc.SETTINGS_PAGE.read_text()
    assert settings_doc.section(page) == settings_doc.render(), \
        "docs/settings.md is stale: run python -m ops.settings_doc"


def test_example_env_file_is_current_and_lists_every_default(tmp_path):
    assert settings_doc.ENV_EXAMPLE.read_text() == settings_doc.render_env_example(), \
        "ops/deploy/router-backend.env.example is stale: run python -m ops.settings_doc"
    uncommented = tmp_path / "example.env"
    uncommented.write_text("\n".join(line[1:] for line in settings_doc.ENV_EXAMPLE.read_text()
                                     .splitlines() if re.match(r"#[A-Z0-9_]+=", line)))
    assert read_env_file(uncommented) == {s.name: s.default for s in SETTINGS}


@pytest.mark.parametrize("name", ["ENROLLMENT_TOKEN", "METRICS_TOKEN", "NOTIFICATION_API_TOKEN"])
def test_every_token_needs_16_characters(name, tmp_path):
    """Issue 27, finding 8: NOTIFICATION_API_TOKEN accepted any length."""
    with pytest.raises(SettingsError, match=name):
        load_settings({"DATA_DIR": str(tmp_path), name: "short"}, env_file=None)
    assert load_settings({"DATA_DIR": str(tmp_path), name: "x" * 16}, env_file=None)


def test_env_file_comments_and_quotes(tmp_path):
    """Issue 26: `# comments` after a value were kept in the value."""
    env_file = tmp_path / ".env"
    env_file.write_text("LISTEN_PORT=9090  # the proxy's upstream\n"
                        "SMTP_FROM='Ops #1 <ops@example.org>'  # quoted: the # is kept\n"
                        'SMTP_HOST="mail.example.org"\n'
                        "export DB_NAME=fleet#1\n")
    values = read_env_file(env_file)
    assert values == {"LISTEN_PORT": "9090", "SMTP_FROM": "Ops #1 <ops@example.org>",
                      "SMTP_HOST": "mail.example.org", "DB_NAME": "fleet#1"}
    assert load_settings({"DATA_DIR": str(tmp_path)}, env_file=env_file).listen_port == 9090
    env_file.write_text("SMTP_FROM='unterminated\n")
    with pytest.raises(SettingsError, match=".env:1"):
        read_env_file(env_file)


# A default quoted beside its setting's name in prose: "`NAME` (15)", "`NAME` (default 30)",
# "`NAME`, 10)" (issue 26: the docs had drifted from the code).
QUOTED_DEFAULT = re.compile(r"`([A-Z][A-Z0-9_]+)`(?: \((?:default )?|, )`?([\d,]+)`?[,)]")


def test_defaults_quoted_in_the_docs_are_the_settings_defaults():
    defaults = {setting.name: setting.default for setting in SETTINGS}
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]
    quoted = [(page.name, name, value.replace(",", "")) for page in pages
              for name, value in QUOTED_DEFAULT.findall(page.read_text()) if name in defaults]
    assert len(quoted) >= 15  # the pattern still finds what the pages quote
    wrong = [(page, name, value, defaults[name]) for page, name, value in quoted
             if value != defaults[name]]
    assert not wrong, wrong
