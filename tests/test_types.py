"""mypy over server/ and engine/ (mypy.ini): never worse than tests/mypy-baseline.txt, the
errors it found when it was introduced, counted per file and error code (not by line, so
that moving code is no new error; not by message, whose wording changes between mypy
releases). A file with more errors of a code than its baseline fails the suite, its errors
printed; an error fixed is a line to take out of the baseline."""

from __future__ import annotations

import re
import subprocess
import sys
import shutil
from collections import Counter
from pathlib import Path

from testkit import REPOSITORY

BASELINE = REPOSITORY / "tests" / "mypy-baseline.txt"
_ERROR = re.compile(r"^(?P<path>[^:]+):\d+: error: .*\[(?P<code>[a-z-]+)\]$")


def mypy_output(root: Path = REPOSITORY) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "mypy", "server", "engine"], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    return done.stdout.splitlines()


def counted(lines: list[str]) -> Counter:
    return Counter(f"{m['path']} [{m['code']}]" for line in lines if (m := _ERROR.match(line)))


def test_the_type_checker_finds_nothing_new():
    baseline = Counter(line for line in BASELINE.read_text().splitlines() if line)
    output = mypy_output()
    worse = counted(output) - baseline
    assert not worse, "more mypy errors than tests/mypy-baseline.txt allows:\n" + "\n".join(
        line for line in output if (m := _ERROR.match(line))
        and f"{m['path']} [{m['code']}]" in worse)


def test_a_new_error_is_counted(tmp_path):
    """An error in a module of its own (one the baseline cannot hold) is what the copy has
    beyond the baseline: one mypy run, where comparing with the tree's own took two."""
    for name in ("server", "engine", "ruledata"):
        shutil.copytree(REPOSITORY / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPOSITORY / "mypy.ini", tmp_path)
    (tmp_path / "engine" / "wrong_on_purpose.py").write_text('WRONG: int = "not a number"\n')
    baseline = Counter(line for line in BASELINE.read_text().splitlines() if line)
    worse = counted(mypy_output(tmp_path)) - baseline
    assert worse == {"engine/wrong_on_purpose.py [assignment]": 1}
