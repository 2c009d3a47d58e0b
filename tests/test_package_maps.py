"""Each package's docstring is the map of its code: it names every module and subpackage it
holds (issue 26: server/__init__ named 9 of 21 modules; ingest, jobs and ops omitted some),
so that a reader finds a capability from the top."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_PACKAGES = ["server", "engine", "ruledata", "ops", "agent", "testkit"]
# Every package under them, found rather than listed, so that a new one is checked too.
PACKAGES = sorted(str(init.parent.relative_to(ROOT)) for top in TOP_PACKAGES
                  for init in (ROOT / top).rglob("__init__.py"))


def members(package: Path) -> list[str]:
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    subpackages = [p.name for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + subpackages)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_docstring_names_every_module(package):
    directory = ROOT / package
    docstring = ast.get_docstring(ast.parse((directory / "__init__.py").read_text())) or ""
    if (directory / "README.md").is_file():  # a package whose map is its README (bench)
        docstring += (directory / "README.md").read_text()
    missing = [name for name in members(directory)
               if f"{name}.py" not in docstring and f"`{name}" not in docstring
               and f"{name}/" not in docstring
               and not re.search(rf"{package.replace('/', '.')}\.{name}\b", docstring)]
    assert not missing, f"{package}/__init__.py does not name: {', '.join(missing)}"
