"""The preprocess job end to end, against a real local HTTP server, and its failure modes."""

from __future__ import annotations

import struct
from pathlib import Path

import orjson
import pytest

from ruledata import fetch
from ruledata.archive import ArchiveError, ArchiveLimits, extract_archive
from server.jobs.cron import JobFailed
from ruledata.workspace import Workspace
from server.jobs.preprocess import run_preprocess
from testkit.database import settings_for
from testkit.rule_archives import (
    RuleFeed,
    fixture_members,
    make_tar_gz,
    make_zip,
    zip_with_symlink,
)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(fetch, "BACKOFF_SECONDS", 0.01)


@pytest.fixture
async def feed(aiohttp_server):
    rule_feed = RuleFeed()
    server = await aiohttp_server(rule_feed.app())
    rule_feed.url = str(server.make_url(""))
    return rule_feed


@pytest.fixture
def feed_settings(feed, database, tmp_path):
    return settings_for(database, tmp_path, RULE_DATA_DIR=str(tmp_path / "ruledata"),
                        RULE_PREPROCESS_VERSION_URL=f"{feed.url}/version.txt",
                        RULE_PREPROCESS_ARCHIVE_URL=f"{feed.url}/archive.zip")


def load_rules(root: Path) -> dict[tuple[str, int], dict]:
    json_dir = root / "rulefile_json"
    manifest = orjson.loads((json_dir / "manifest.json").read_bytes())
    rules = {}
    for name in manifest["files"]:
        for rule in orjson.loads((json_dir / name).read_bytes())["rules"]:
            rules[(rule["file"], rule["sid"], rule["rev"])] = rule
    return rules


async def test_publishes_fixture_ruleset(feed_settings):
    result = await run_preprocess(feed_settings, start_method="fork")
    assert result.status == "updated" and result.version == "1001"
    root = feed_settings.rule_data_path
    assert (root / "rules" / "rules" / "compromised-ips.txt").read_text().startswith("198.")
    assert (root / "idps_rules").is_dir()
    manifest = orjson.loads((root / "rulefile_json" / "manifest.json").read_bytes())
    assert manifest["version"] == "1001"
    counts = manifest["counts"]
    assert (counts["files"], counts["rules"], counts["enabled"], counts["disabled"]) == (3, 14, 10, 4)
    assert counts["compromised_ips"] == 3 and counts["superseded"] == 2
    assert counts["skipped_lines"] >= 3  # comments, garbage, the rule without sid

    rules = load_rules(root)
    stage2 = rules[("local-test.rules", 9000003, 2)]
    assert stage2["msg"] == 'TEST MALWARE beacon stage 2 \\"quoted\\" \\; semicolon'
    assert stage2["flowbits"] == {"isset": ["TEST.beacon"]}
    assert stage2["references"] == ["url,example.org/beacon", "cve,2020-0001"]
    assert stage2["metadata"]["signature_severity"] == ["Critical"]
    assert (stage2["class_priority"], stage2["app_proto"], stage2["proto"]) == (1, "http", "http")
    assert rules[("local-test.rules", 9000002, 1)]["noalert"] is True
    joined = rules[("local-test.rules", 9000006, 1)]
    assert joined["msg"] == "TEST multi-line rule joined" and joined["dst_port"] == "[8080,8443]"
    assert 'content:"POST"' in joined["raw"]
    disabled = rules[("local-test.rules", 9000005, 1)]
    assert disabled["enabled"] is False and disabled["raw"].startswith("alert tls")
    assert rules[("local-test.rules", 9000009, 1)]["flowbits"] == {"isset": ["TEST.a", "TEST.b"]}
    assert rules[("local-test.rules", 9000009, 1)]["app_proto"] == "telnet"
    retired = rules[("test-deleted.rules", 9000099, 9)]
    assert retired["deleted"] is True and retired["eligible"] is False
    # Duplicated gid:sid: the highest rev wins, the others are listed as superseded.
    superseded = {(gid, sid, file) for gid, sid, file, _ in manifest["superseded"]}
    assert superseded == {(1, 9000007, "local-test.rules"), (1, 9000007, "other-test.rules")}
    # Weights follow the documented factors: critical > major, SSLDecrypt/slow rules low.
    assert stage2["weight"] > rules[("local-test.rules", 9000001, 3)]["weight"] > joined["weight"]


async def test_same_archive_gives_identical_json(feed_settings, tmp_path):
    await run_preprocess(feed_settings, start_method="fork")  # the command's pool
    first = load_rules(feed_settings.rule_data_path)
    spawned = feed_settings.replace(rule_data_dir=tmp_path / "spawned")
    await run_preprocess(spawned, start_method="spawn")  # the server's pool
    in_process = feed_settings.replace(rule_data_dir=tmp_path / "in-process")
    await run_preprocess(in_process)  # no pool
    assert load_rules(spawned.rule_data_path) == first == load_rules(in_process.rule_data_path)


async def test_unchanged_stamp_downloads_nothing_and_new_stamp_replaces(feed, feed_settings):
    await run_preprocess(feed_settings)
    assert feed.archive_requests == 1
    again = await run_preprocess(feed_settings)
    assert again.status == "unchanged" and feed.archive_requests == 1

    feed.version = b"1002"
    extra = b'alert tcp any any -> any any (msg:"TEST new in 1002"; sid:9100001; rev:1;)\n'
    feed.archive = make_tar_gz(fixture_members({"rules/new.rules": extra}))
    replaced = await run_preprocess(feed_settings.replace(
        rule_preprocess_archive_url=f"{feed.url}/archive.tar.gz"))
    assert replaced.status == "updated" and replaced.counts["files"] == 4
    assert ("new.rules", 9100001, 1) in load_rules(feed_settings.rule_data_path)
    versions = list((feed_settings.rule_data_path / "versions").iterdir())
    assert len(versions) == 2  # the current one and the one before


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def with_declared_size(data: bytes, size: int) -> bytes:
    """Patch the central directory so the first member claims `size` unpacked bytes."""
    at = data.index(b"PK\x01\x02")
    return data[:at + 24] + struct.pack("<I", size) + data[at + 28:]


BROKEN_ARCHIVES = {
    "truncated zip": (lambda: truncated(make_zip(fixture_members())), "damaged"),
    "truncated tar.gz": (lambda: truncated(make_tar_gz(fixture_members())), "damaged"),
    "zip with ../": (lambda: make_zip(fixture_members({"../escape.rules": b"x"})), "unsafe"),
    "zip with absolute path": (lambda: make_zip(fixture_members({"/etc/x.rules": b"x"})),
                               "unsafe"),
    "zip with link": (lambda: zip_with_symlink(fixture_members(), "rules/link.rules",
                                               "/etc/passwd"), "link"),
    "tar with link": (lambda: make_tar_gz(fixture_members(), ("rules/l.rules", "/etc/passwd")),
                      "link"),
    "huge declared size": (lambda: with_declared_size(make_zip(fixture_members()), 0xFFFFFFF0),
                           "more than"),
    "not an archive": (lambda: b"<html>a captive portal page</html>", "damaged"),
    "no rules inside": (lambda: make_zip({"README": b"hello"}), "no .rules"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_ARCHIVES))
async def test_broken_archive_keeps_previous_ruleset(feed, feed_settings, case):
    await run_preprocess(feed_settings)
    before = load_rules(feed_settings.rule_data_path)
    make, expected = BROKEN_ARCHIVES[case]
    feed.version, feed.archive = b"2000", make()
    with pytest.raises(JobFailed, match=expected):
        await run_preprocess(feed_settings)
    assert load_rules(feed_settings.rule_data_path) == before
    assert list(Workspace(feed_settings.rule_data_path).staging.iterdir()) == []


@pytest.mark.parametrize("status,expected", [(500, "after 3 attempts"), (404, "HTTP 404")])
async def test_version_url_failure_keeps_previous_ruleset(feed, feed_settings, status, expected):
    await run_preprocess(feed_settings)
    before = load_rules(feed_settings.rule_data_path)
    feed.version_status = status
    with pytest.raises(JobFailed, match=expected):
        await run_preprocess(feed_settings)
    assert load_rules(feed_settings.rule_data_path) == before


async def test_server_dying_mid_download_is_retried_then_reported(feed, feed_settings):
    await run_preprocess(feed_settings)
    before = load_rules(feed_settings.rule_data_path)
    feed.version, feed.die_after_bytes = b"3000", 500
    requests_before = feed.archive_requests
    with pytest.raises(JobFailed, match="after 3 attempts"):
        await run_preprocess(feed_settings)
    assert feed.archive_requests - requests_before == 3
    assert load_rules(feed_settings.rule_data_path) == before


def test_extract_limits(tmp_path):
    archive = tmp_path / "a.zip"
    archive.write_bytes(make_zip(fixture_members()))
    with pytest.raises(ArchiveError, match="more than 2 members"):
        extract_archive(archive, tmp_path / "x", ArchiveLimits(max_members=2))
    with pytest.raises(ArchiveError, match="unpacks to more than"):
        extract_archive(archive, tmp_path / "y", ArchiveLimits(max_unpacked_bytes=1000))
