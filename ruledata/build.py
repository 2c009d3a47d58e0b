"""Turn extracted rule files into the ruleset JSON, using the cores.

Each rule file is parsed, weighted and written as `rulefile_json/<file>.json` by a worker
process, which sends back only a compact row per rule (shipping whole parsed rules between
processes costs more than parsing them). The parent then resolves duplicated gid:sid (the
highest rev wins; on equal revs the first file in name order) and writes the manifest that the
engine loads: counts, files, and the rules superseded by a duplicate.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import Executor
from datetime import date
from pathlib import Path

import orjson

from ruledata.parser import parse_text
from ruledata.weights import annotate, parse_classification

MANIFEST = "manifest.json"
_UPDATED = re.compile(rb"updated_at (\d{4}_\d\d_\d\d)")

# Row sent back per rule: (gid, sid, rev, enabled, eligible)
RuleRow = tuple[int, int, int, bool, bool]


def newest_update(rule_files: list[Path]) -> date | None:
    """The newest `updated_at` in the ruleset: the reference point of the recency factor.
    Found with a byte scan so workers can weight rules without seeing each other's files."""
    newest = None
    for path in rule_files:
        for stamp in _UPDATED.findall(path.read_bytes()):
            year, month, day = map(int, stamp.split(b"_"))
            try:
                found = date(year, month, day)
            except ValueError:
                continue
            newest = found if newest is None or found > newest else newest
    return newest


def process_rule_file(path: str, json_dir: str, classification: dict[str, int],
                      newest: date | None) -> tuple[str, int, list[RuleRow]]:
    """Worker: parse one file, weight its rules, write its JSON. Returns (file, skipped, rows)."""
    source = Path(path)
    rules, skipped = parse_text(source.read_text(encoding="utf-8", errors="replace"), source.name)
    annotate(rules, classification, newest)
    target = Path(json_dir) / f"{source.name}.json"
    _write_durably(target, orjson.dumps({"file": source.name, "rules": rules}))
    rows = [(r["gid"], r["sid"], r["rev"], r["enabled"], r["eligible"]) for r in rules]
    return source.name, skipped, rows


def _write_durably(path: Path, data: bytes) -> None:
    with path.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def build_ruleset(rule_files: list[Path], classification_file: Path | None, json_dir: Path,
                  executor: Executor | None) -> dict:
    """Write every file's JSON and return the manifest (not yet written)."""
    json_dir.mkdir(parents=True, exist_ok=True)
    classification = (parse_classification(classification_file.read_text(errors="replace"))
                      if classification_file else {})
    newest = newest_update(rule_files)
    largest_first = sorted(rule_files, key=lambda p: p.stat().st_size, reverse=True)
    args = [(str(p), str(json_dir), classification, newest) for p in largest_first]
    if executor is None:
        results = [process_rule_file(*a) for a in args]
    else:
        results = list(executor.map(process_rule_file, *zip(*args)))
    results.sort(key=lambda result: result[0])
    return _manifest(results, classification, newest)


def _manifest(results: list[tuple[str, int, list[RuleRow]]], classification: dict[str, int],
              newest: date | None) -> dict:
    winners: dict[tuple[int, int], tuple[int, str, int]] = {}  # id -> (rev, file, position)
    superseded: list[list] = []
    for file, _, rows in results:
        for position, (gid, sid, rev, _, _) in enumerate(rows):
            current = winners.get((gid, sid))
            if current is None or rev > current[0]:
                if current is not None:
                    superseded.append([gid, sid, current[1], current[2]])
                winners[(gid, sid)] = (rev, file, position)
            else:
                superseded.append([gid, sid, file, position])
    lost = {(file, position) for _, _, file, position in superseded}
    counts = {"files": len(results), "rules": 0, "enabled": 0, "disabled": 0, "eligible": 0,
              "superseded": len(superseded),
              "skipped_lines": sum(skipped for _, skipped, _ in results)}
    for file, _, rows in results:
        for position, (_, _, _, enabled, eligible) in enumerate(rows):
            counts["rules"] += 1
            counts["enabled" if enabled else "disabled"] += 1
            counts["eligible"] += eligible and (file, position) not in lost
    return {"files": [f"{file}.json" for file, _, _ in results], "counts": counts,
            "superseded": superseded, "classification": classification,
            "recency_reference": newest.isoformat() if newest else None}


def write_manifest(json_dir: Path, manifest: dict) -> None:
    _write_durably(json_dir / MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))


def read_manifest(json_dir: Path) -> dict | None:
    try:
        return orjson.loads((json_dir / MANIFEST).read_bytes())
    except FileNotFoundError:
        return None
