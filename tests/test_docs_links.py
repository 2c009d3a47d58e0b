"""The docs' links hold (issue 54: a link to an anchor that did not exist): every relative
link of README.md and docs/*.md names a file of the repository and, with `#anchor`, a
heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces to `-`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit import REPOSITORY

PAGES = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("*.md")),
         REPOSITORY / "bench" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    found = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and (match := re.match(r"^#{1,6}\s+(.*)$", line)):
            text = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower().replace("`", ""))
            found.add(text.replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPOSITORY)))
def test_every_relative_link_and_anchor_exists(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked (no network here)
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading for #{anchor}")
    assert not broken, broken


def test_the_command_table_names_each_command_once():
    rows = [line.split("|")[1].strip() for line in
            (REPOSITORY / "docs" / "operations.md").read_text().splitlines()
            if line.startswith("| `")]
    assert len(rows) == len(set(rows)), [row for row in rows if rows.count(row) > 1]
