"""The preprocess job: version check, download, verify, extract, parse, weight, publish.

    result = await preprocess(rule_data_dir, RuleSource(archive_url, version_url),
                              progress=print, executor=parse_pool)

Stops early when the published version equals the one in use. Any failure raises
`PreprocessError` with a clear message and leaves the ruleset in use untouched.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import aiohttp

from ruledata.archive import ArchiveError, extract_archive
from ruledata.build import build_ruleset, read_manifest, write_manifest
from ruledata.compromised import compromised_ips_of
from ruledata.fetch import FetchError, download, fetch_version
from ruledata.workspace import Workspace

MAX_ARCHIVE_BYTES = 512 * 1024 * 1024


class PreprocessError(Exception):
    pass


@dataclass(frozen=True)
class RuleSource:
    """Where the open ruleset comes from: the archive (zip or tar.gz) and its version stamp,
    or the version itself (an archive given by hand, offline)."""
    archive_url: str
    version_url: str = ""
    version: str | None = None


@dataclass
class PreprocessResult:
    status: str                  # "updated" or "unchanged"
    version: str
    counts: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    def as_detail(self) -> dict:
        return {"status": self.status, "version": self.version, "counts": self.counts,
                "timings": {name: round(seconds, 3) for name, seconds in self.timings.items()}}

    def summary(self) -> str:
        if self.status == "unchanged":
            return f"ruleset {self.version} already in use; nothing downloaded"
        c = self.counts
        return (f"ruleset {self.version} published: {c['rules']} rules ({c['enabled']} enabled, "
                f"{c['disabled']} disabled, {c['eligible']} eligible), {c['files']} files, "
                f"{c['compromised_ips']} compromised IPs, {c['skipped_lines']} non-rule lines "
                f"skipped, in {self.timings['total']:.2f}s")


def current_version(workspace: Workspace) -> str | None:
    manifest = read_manifest(workspace.json_dir)
    return manifest.get("version") if manifest else None


def _archive_name(url: str) -> str:
    return "archive.zip" if urlparse(url).path.endswith(".zip") else "archive.tar.gz"


def _build(workspace: Workspace, archive: Path, staged: Path, version: str, source: str,
           executor: Executor | None) -> dict:
    """Blocking part: extract, parse, weight, write JSON and manifest (run in a thread)."""
    started = time.perf_counter()
    extracted = extract_archive(archive, staged / "rules")
    archive.unlink()
    extracted_at = time.perf_counter()
    manifest = build_ruleset(extracted.rule_files, extracted.classification,
                             staged / "rulefile_json", executor)
    manifest["counts"]["compromised_ips"] = len(compromised_ips_of(staged))
    manifest.update(version=version, source=source,
                    built_at=datetime.now(timezone.utc).isoformat(),
                    timings={"extract": extracted_at - started,
                             "parse_and_write": time.perf_counter() - extracted_at})
    write_manifest(staged / "rulefile_json", manifest)
    return manifest


async def preprocess(rule_data_dir: Path, source: RuleSource,
                     progress: Callable[[str], None] = lambda _: None,
                     executor: Executor | None = None) -> PreprocessResult:
    """Parsing runs in `executor` (processes, for the cores) when given, else in a thread."""
    started = time.perf_counter()
    workspace = Workspace(rule_data_dir)
    workspace.prepare()
    workspace.clear_staging()
    try:
        async with aiohttp.ClientSession() as session:
            version = source.version
            if version is None:
                progress(f"fetching version stamp {source.version_url}")
                version = await fetch_version(session, source.version_url)
            if version == current_version(workspace):
                return PreprocessResult("unchanged", version)
            staged = workspace.new_staging()
            archive = staged / _archive_name(source.archive_url)
            progress(f"downloading {source.archive_url} (version {version})")
            size = await download(session, source.archive_url, archive, MAX_ARCHIVE_BYTES)
        downloaded = time.perf_counter()
        progress(f"downloaded {size} bytes; extracting and parsing")
        loop = asyncio.get_running_loop()
        manifest = await loop.run_in_executor(
            None, _build, workspace, archive, staged, version, source.archive_url, executor)
        workspace.publish(staged, version)
    except (FetchError, ArchiveError) as error:
        workspace.clear_staging()
        raise PreprocessError(str(error)) from None
    except BaseException:
        workspace.clear_staging()
        raise
    timings = {**manifest["timings"], "download": downloaded - started,
               "total": time.perf_counter() - started}
    return PreprocessResult("updated", version, manifest["counts"], timings)
