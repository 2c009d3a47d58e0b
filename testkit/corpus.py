"""The real corpus (the ET Open archive, real EVE output: tests/corpus, or ../shared/corpus
beside a checkout) as tests and benchmarks use it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from server.db.location import DatabaseLocation
from testkit import CORPUS, REPOSITORY
from testkit.database import database_env

CORPUS_RULES = CORPUS / "et-open-2020"
CORPUS_ARCHIVE = CORPUS_RULES / "emerging.rules.zip"


def corpus_path(*parts: str) -> Path:
    """A corpus file (always there: the repository keeps its own copy)."""
    return CORPUS.joinpath(*parts)


def corpus_rule_settings(rule_data_dir: Path) -> dict[str, str]:
    """Settings that make the preprocess job publish the corpus archive into rule_data_dir."""
    return {"RULE_DATA_DIR": str(rule_data_dir),
            "RULE_PREPROCESS_ARCHIVE_URL": CORPUS_ARCHIVE.as_uri(),
            "RULE_PREPROCESS_VERSION_URL": (CORPUS_RULES / "version.txt").as_uri()}


def publish_corpus_ruleset(location: DatabaseLocation, workdir: Path) -> dict[str, str]:
    """Publish the corpus archive with the real `rulepreprocess` command; returns the
    settings under which a server generates from it."""
    settings = corpus_rule_settings(workdir / "rules")
    env = {**os.environ, **database_env(location), "DATA_DIR": str(workdir),
           "DB_LOG_LEVEL": "error", **settings}
    result = subprocess.run([sys.executable, "-m", "ops.rulepreprocess"], env=env, cwd=REPOSITORY,
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"rulepreprocess failed: {result.stderr}")
    return settings
