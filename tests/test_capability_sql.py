"""Each capability's tables are named in SQL only inside its folder (README, "Layout"): a
statement that reads or writes another capability's table lives with that capability and is
called, or composed, from there. Checked on the SQL text of every string of the shipped code
(docstrings aside), so a statement moved back out of its folder is reported by file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from testkit import REPOSITORY

# A table family, and the one folder whose code may name its tables in SQL.
HOMES = {r"\bhunt_\w+": "server/hunt/", r"\bfleet_\w+": "server/fleet/",
         r"\bnotifications\b": "server/notify/", r"\bconsole_\w+": "server/console/",
         r"\brouter_rules\b": "server/generation/",
         r"\bdocument_(?:versions|items)\b": "server/polling/"}
SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|TRUNCATE|COPY|CREATE|ALTER|DROP|FROM|JOIN)\b")
SHIPPED = ("server", "ops", "engine", "ruledata")
NOT_CHECKED = ("bench/",)   # benchmarks build and read any table


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def sql_outside_its_home(root: Path) -> list[str]:
    misplaced = []
    for package in SHIPPED:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative.startswith(NOT_CHECKED):
                continue
            tree = ast.parse(path.read_text())
            docstrings = _docstrings(tree)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and id(node) not in docstrings and SQL.search(node.value)):
                    for family, home in HOMES.items():
                        names = re.findall(family, node.value)
                        if names and not relative.startswith(home):
                            misplaced.append(f"{relative}:{node.lineno} {names[0]}")
    return misplaced


def test_each_capability_names_its_tables_only_in_its_folder():
    assert sql_outside_its_home(REPOSITORY) == []


def test_a_statement_outside_its_capability_is_reported(tmp_path):
    for package in SHIPPED:
        (tmp_path / package).mkdir()
    (tmp_path / "server" / "status.py").write_text(
        '"""A docstring naming fleet_attackers FROM anywhere is prose."""\n'
        'PENDING = "SELECT count(*) FROM hunt_pending"\n')
    (tmp_path / "server" / "hunt").mkdir()
    (tmp_path / "server" / "hunt" / "sql.py").write_text(
        'PENDING = "SELECT count(*) FROM hunt_pending"\n')
    assert sql_outside_its_home(tmp_path) == ["server/status.py:2 hunt_pending"]
