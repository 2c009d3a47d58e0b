"""Our parser against the peer parser (suricata-update's `rule.parse_file`), field by field:
on the fixture ruleset in every run, and on the ET Open corpus archive when it is present."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from suricata.update import rule as peer

from ruledata.parser import parse_text
from testkit.corpus import corpus_path
from testkit.rule_archives import FIXTURE_RULES


def peer_flowbits(values: list[str]) -> dict[str, list[str]]:
    """suricata-update keeps `flowbits:` values as written; split them the way Suricata reads
    them (`command,name|name`) to compare with ours."""
    bits: dict[str, list[str]] = {}
    for value in values:
        command, _, names = value.partition(",")
        if command.strip() in ("set", "setx", "unset", "toggle", "isset", "isnotset"):
            names = names.split(",")[0] if command.strip() == "setx" else names
            bits.setdefault(command.strip(), []).extend(
                n.strip() for n in re.split(r"[|&]", names) if n.strip())
    return bits


def compare(files: list[Path]) -> tuple[int, int]:
    ours, theirs = [], []
    for path in files:
        ours += parse_text(path.read_text(encoding="utf-8"), path.name)[0]
        theirs += peer.parse_file(str(path), group=path.name)
    ours_by_id = {(r["file"], r["gid"], r["sid"], r["rev"]): r for r in ours}
    theirs_by_id = {(r["group"], r["gid"], r["sid"], r["rev"]): r for r in theirs}
    assert len(ours_by_id) == len(ours) and len(theirs_by_id) == len(theirs)
    assert ours_by_id.keys() == theirs_by_id.keys()
    for rule_id, mine in ours_by_id.items():
        other = theirs_by_id[rule_id]
        assert (mine["action"], mine["enabled"], mine["msg"], mine["classtype"]) == \
            (other["action"], other["enabled"], other["msg"], other["classtype"]), rule_id
        assert mine["flowbits"] == peer_flowbits(other["flowbits"]), rule_id
        assert mine["noalert"] == other["noalert"], rule_id
    enabled = sum(r["enabled"] for r in ours)
    assert enabled == sum(r.enabled for r in theirs)
    return enabled, len(ours) - enabled


def test_fixture_ruleset_matches_peer():
    enabled, disabled = compare(sorted(FIXTURE_RULES.glob("*.rules")))
    assert (enabled, disabled) == (10, 4)


def test_corpus_ruleset_matches_peer(tmp_path):
    archive = corpus_path("et-open-2020", "emerging.rules.zip")
    with zipfile.ZipFile(archive) as z:
        names = [n for n in z.namelist() if n.endswith(".rules")]
        z.extractall(tmp_path, names)
    enabled, disabled = compare(sorted((tmp_path / "rules").glob("*.rules")))
    # The corpus README: about 7,900 enabled and 6,500 disabled rules.
    assert 7500 < enabled < 8300 and 6000 < disabled < 7000


@pytest.mark.parametrize("line", [
    'alert tcp any any -> any any (msg:"no end"; sid:1; rev:1',
    "alert tcp any any -> any any",
    "# just a comment (with parens)",
    'alert tcp any any -> any any (msg:"bad sid"; sid:x;)',
])
def test_non_rules_are_skipped_not_fatal(line):
    rules, skipped = parse_text(line + "\n")
    assert (rules, skipped) == ([], 1)
