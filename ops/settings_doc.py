"""Render the settings table into README.md (`python -m ops.settings_doc`).

tests/test_settings.py fails when README's table and server/settings.py disagree.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from server.settings import SETTINGS

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- settings:start -->", "<!-- settings:end -->"


def render() -> str:
    lines = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for setting in SETTINGS:
        default = f"`{setting.default}`" if setting.default else "(unset)"
        lines.append(f"| `{setting.name}` | {default} | {setting.help} |")
    return "\n".join(lines)


_BLOCK = re.compile(re.escape(START) + r"\n(.*?)" + re.escape(END), re.S)


def section(text: str) -> str:
    match = _BLOCK.search(text)
    return match.group(1).rstrip("\n") if match else ""


def main() -> int:
    text = README.read_text()
    if START not in text:
        print("README.md has no settings markers", file=sys.stderr)
        return 1
    README.write_text(_BLOCK.sub(lambda _: f"{START}\n{render()}\n{END}", text, count=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
