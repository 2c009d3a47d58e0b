"""README's first session works as written from a checkout alone (issue 26): no ../shared,
the embedded PostgreSQL, the service started as the first set-up command starts it, then the
"Try it" commands run by bash, one by one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from testkit import REPOSITORY
from testkit.server import free_port, wait_listening

README = (REPOSITORY / "README.md").read_text()


def try_it_commands() -> list[str]:
    return block_commands(r"Try it:\n\n```sh\n(.*?)```")


def block_commands(pattern: str) -> list[str]:
    """The commands of README's code block that `pattern` finds, continuation lines joined,
    comments left out."""
    block = re.search(pattern, README, re.S).group(1)
    joined = block.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_first_session_works_without_the_shared_corpus(tmp_path):
    port = free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("DB_")}
    env.update(DATA_DIR=str(tmp_path / "var"), LISTEN_PORT=str(port),
               RULE_PREPROCESS_AT_START="false")  # (the first start downloads ET Open)
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "ops.cli", "serve"], env=env, stdout=log,
                              stderr=log, cwd=REPOSITORY, start_new_session=True)
    try:
        assert wait_listening(server, port, 120), (tmp_path / "server.log").read_text()
        outputs = []
        for command in try_it_commands():
            command = command.replace("localhost:8080", f"127.0.0.1:{port}").replace(
                ".venv/bin/router-backend", f"{sys.executable} -m ops.cli")
            done = subprocess.run(["bash", "-c", command], env=env, cwd=REPOSITORY,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            outputs.append(done.stdout)
        # The offline ruleset, as README gives it (issue 62: it named a file not there).
        for command in block_commands(r"without internet access.*?```sh\n(.*?)```"):
            command = command.replace(".venv/bin/rulepreprocess",
                                      f"{sys.executable} -m ops.rulepreprocess")
            done = subprocess.run(["bash", "-c", command], env=env, cwd=REPOSITORY,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            assert "20200616" in done.stdout, done.stdout
    finally:
        server.terminate()
        server.wait(60)
        log.close()
    health, alerts, others, updated, exported, rows, hunted = outputs
    assert '"status": "ok"' in health or '"status":"ok"' in health
    for stored, accepted in ((alerts, 3), (others, 3)):
        answer = stored.replace(" ", "")
        assert f'"accepted":{accepted}' in answer and '"rejected":0' in answer, stored
        assert '"unread"' not in stored  # only what the service reads is sent (issue 62)
    assert "ids_updated_at" in updated
    sample = (REPOSITORY / "tests" / "fixtures" / "eve-sample.ndjson").read_text()
    assert exported.splitlines() == sample.splitlines()[:3]  # as sent, oldest first
    assert "(3 rows)" in rows and "203.0.113.50" in rows  # psql's rows of the stored alerts
    assert hunted.startswith("1 match(es)") and "aa:bb:cc:dd:ee:ff\tsid\t2001219" in hunted


CONSOLE_MD = (REPOSITORY / "docs" / "console.md").read_text()


def console_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", CONSOLE_MD, re.S)


def _after(text: str, heading: str) -> str:
    lines = text.splitlines()
    return next(lines[n + 1] for n, line in enumerate(lines) if line.startswith(heading))


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_console_md_signs_in_as_written(tmp_path):
    """docs/console.md's blocks in order (issue 62): the credentials made, the settings put
    in `.env` as shown (single quotes), the service started beside it, the curl sign-in."""
    port = free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("DB_")}
    env.update(DATA_DIR=str(tmp_path / "var"), LISTEN_PORT=str(port),
               RULE_PREPROCESS_AT_START="false")
    made, settings_block, sign_in = console_blocks()[:3]
    outputs = []
    for command in (line for line in made.splitlines() if line.strip()):
        command = command.split("#")[0].replace(".venv/bin/router-backend",
                                                f"{sys.executable} -m ops.cli")
        done = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, text=True,
                              input="a-typed-secret-of-20c\na-typed-secret-of-20c\n",
                              capture_output=True, timeout=60)
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout)
    secret = _after(outputs[0], "secret for ann")
    entries = ",".join(_after(out, "add to CONSOLE_USERS") for out in outputs)
    console_secret = _after(outputs[0], "and set CONSOLE_SECRET")
    dotenv = settings_block.replace("ann:support:scrypt$16384$8$1$...$...", entries).replace(
        "the secret the command printed", console_secret)
    (tmp_path / ".env").write_text(dotenv)
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "ops.cli", "serve"], env=env, stdout=log,
                              stderr=log, cwd=tmp_path, start_new_session=True)
    try:
        assert wait_listening(server, port, 120), (tmp_path / "server.log").read_text()
        script = sign_in.replace("the secret console credential printed for ann", secret) \
            .replace("localhost:8080", f"127.0.0.1:{port}")
        done = subprocess.run(["bash", "-c", script], env=env, cwd=tmp_path, text=True,
                              capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == "303" and "<h1>" in done.stdout, done.stdout
    finally:
        server.terminate()
        server.wait(60)
        log.close()
