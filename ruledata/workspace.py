"""The rule data directory (RULE_DATA_DIR) and the atomic switch between rulesets.

    RULE_DATA_DIR/
      versions/<stamp>/rules/...          one complete ruleset per directory
      versions/<stamp>/rulefile_json/...
      current -> versions/<stamp>         the ruleset in use; replaced by one rename
      rules -> current/rules              the seed's paths, always through `current`
      rulefile_json -> current/rulefile_json
      idps_rules/                         per-router rule files (written by the engine)
      staging/                            rulesets being built

A ruleset is built in `staging/`, made durable, moved into `versions/`, and only then
`current` is switched with `os.replace` of a symlink, which is atomic: a run that fails or is
killed at any point leaves the previous ruleset whole and in use.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

KEEP_VERSIONS = 2  # the current one and the one before (engine workers may still read it)


class Workspace:
    def __init__(self, root: Path):
        self.root = root
        self.versions = root / "versions"
        self.staging = root / "staging"
        self.current = root / "current"
        self.idps_rules = root / "idps_rules"

    @property
    def json_dir(self) -> Path:
        return self.root / "rulefile_json"

    def prepare(self) -> None:
        for folder in (self.versions, self.staging, self.idps_rules):
            folder.mkdir(parents=True, exist_ok=True)
        for name in ("rules", "rulefile_json"):
            link = self.root / name
            if not link.is_symlink():
                if link.exists():
                    shutil.rmtree(link)
                link.symlink_to(Path("current") / name)

    def new_staging(self) -> Path:
        path = self.staging / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def clear_staging(self) -> None:
        """Leftovers of runs that failed or were killed."""
        for leftover in self.staging.iterdir():
            shutil.rmtree(leftover, ignore_errors=True)

    def publish(self, staged: Path, version: str) -> Path:
        """Move a complete staged ruleset into versions/ and make it current, atomically."""
        stamp = f"{_safe(version)}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-" \
                f"{uuid.uuid4().hex[:6]}"
        final = self.versions / stamp
        os.replace(staged, final)
        _fsync_dir(self.versions)
        link = self.root / f".current-{uuid.uuid4().hex}"
        link.symlink_to(Path("versions") / stamp)
        os.replace(link, self.current)
        _fsync_dir(self.root)
        self._prune(keep=final)
        return final

    def current_version_dir(self) -> Path | None:
        return self.current.resolve() if self.current.is_symlink() else None

    def current_ruleset(self) -> "PublishedRuleset | None":
        """The ruleset in use, from its directory's name alone (one readlink: cheap enough
        for every health probe); None before the first."""
        try:
            name = Path(os.readlink(self.current)).name
        except OSError:
            return None
        version, stamp, _ = name.rsplit("-", 2)
        published = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
        return PublishedRuleset(version, published)

    def _prune(self, keep: Path) -> None:
        ordered = sorted(self.versions.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        survivors = {keep} | set(ordered[:KEEP_VERSIONS])
        for version in ordered:
            if version not in survivors:
                shutil.rmtree(version, ignore_errors=True)


@dataclass(frozen=True)
class PublishedRuleset:
    version: str
    published_at: datetime

    @property
    def age_seconds(self) -> int:
        return int((datetime.now(timezone.utc) - self.published_at).total_seconds())


def _safe(version: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", version)[:64] or "unversioned"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
