"""The layers of README's layout, as import-linter checks them (.importlinter): the project
keeps them, and a deliberate upward import in a copy of the tree is reported, as is the
agent importing the service or a package beyond the standard library."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from testkit import REPOSITORY

PACKAGES = ("agent", "bench", "ops", "server", "engine", "ruledata", "migrations", "testkit")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).with_name("lint-imports")
    # The tree under test comes first on the path, so its own packages are the ones analysed.
    return subprocess.run([str(lint), "--no-cache"], cwd=root, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_project_keeps_its_layers():
    result = lint_imports(REPOSITORY)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 8 kept, 0 broken." in result.stdout


def copy_of_the_tree(root: Path) -> None:
    for name in PACKAGES:
        shutil.copytree(REPOSITORY / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPOSITORY / ".importlinter", root)


def test_an_upward_import_is_reported(tmp_path):
    copy_of_the_tree(tmp_path)
    worker = tmp_path / "engine" / "worker.py"
    worker.write_text(worker.read_text() + "\nfrom server.settings import Settings  # upward\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and "engine.worker -> server.settings" in result.stdout


def test_a_capability_importing_another_or_the_plumbing_importing_up_is_reported(tmp_path):
    """server/ in layers (issue 33: 43 of its 79 imports between packages sat in cycles)."""
    copy_of_the_tree(tmp_path)
    status = tmp_path / "server" / "hunt" / "status.py"
    status.write_text(status.read_text() + "\nfrom server.notify import texts  # sideways\n")
    limits = tmp_path / "server" / "web" / "limits.py"
    limits.write_text(limits.read_text() + "\nfrom server.routers import mac  # upward\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "server.hunt.status -> server.notify.texts" in result.stdout
    assert "server.web.limits -> server.routers.mac" in result.stdout


def test_shipped_code_importing_a_benchmark_is_reported(tmp_path):
    """bench/ is development only, like testkit/: a command importing it would fail on an
    installed copy, where bench/ is not shipped."""
    copy_of_the_tree(tmp_path)
    status = tmp_path / "ops" / "status.py"
    status.write_text(status.read_text() + "\nfrom bench import fleet  # a benchmark\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "ops.status -> bench.fleet" in result.stdout


def test_the_agent_importing_the_service_or_a_third_party_package_is_reported(tmp_path):
    copy_of_the_tree(tmp_path)
    tail = tmp_path / "agent" / "tail.py"
    tail.write_text(tail.read_text() + "\nimport orjson\nfrom server.text import is_plain_text\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "agent.tail -> server.text" in result.stdout and "agent.tail -> orjson" in result.stdout


def test_no_command_line_flag_is_hidden():
    """The supervisor starts its children by their own entry (server/process/child.py), so
    the operators' commands have no flags kept from their --help."""
    hidden = [str(path.relative_to(REPOSITORY)) for folder in ("ops", "server")
              for path in (REPOSITORY / folder).rglob("*.py")
              if "argparse.SUPPRESS" in path.read_text()]
    assert hidden == []
