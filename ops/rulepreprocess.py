"""`rulepreprocess`: run the rule preprocess job once, now (progress on stderr, summary on
stdout; exit 0 when the ruleset is published or already current, 1 on failure).

    rulepreprocess                                   # the feed of the settings (internet)
    rulepreprocess --archive FILE [--version V]      # a local archive, offline

A local archive (zip or tar.gz in the feed's layout) is versioned by `--version`, or else by
the first 12 hex digits of its SHA-256, so the same file given twice is published once.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import sys
from pathlib import Path

from ops.command import CommandError, run_command
from ruledata.preprocess import RuleSource
from server.db.pool import Database
from server.jobs.cron import run_job
from server.jobs.preprocess import run_preprocess
from server.settings import Settings

PROG = "rulepreprocess"


def progress(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def local_source(archive: Path, version: str | None) -> RuleSource:
    if not archive.is_file():
        raise CommandError(f"{archive}: no such archive file")
    if version is None:
        digest = hashlib.sha256()
        with archive.open("rb") as data:
            for block in iter(lambda: data.read(1 << 20), b""):
                digest.update(block)
        version = f"local-{digest.hexdigest()[:12]}"
    return RuleSource(archive.resolve().as_uri(), version=version)


async def preprocess_now(settings: Settings, db: Database,
                         archive: Path | None = None, version: str | None = None) -> int:
    source = local_source(archive, version) if archive is not None else None
    results = []

    async def job() -> dict:
        result = await run_preprocess(settings, start_method="fork", progress=progress,
                                      source=source)
        results.append(result)
        return result.as_detail()

    outcome = await run_job(db, PROG, job, log_failure=False)  # its one line is below
    if outcome.status == "skipped":
        raise CommandError("another preprocess run is in progress; try again later")
    if outcome.status == "failed":
        raise CommandError(f"{outcome.error} (the previous ruleset stays in use)")
    print(results[0].summary())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", type=Path, default=None,
                        help="publish this local archive instead of downloading the feed")
    parser.add_argument("--version", default=None,
                        help="the version to record for --archive (default: from its SHA-256)")
    args = parser.parse_args(argv)
    if args.version is not None and args.archive is None:
        parser.error("--version goes with --archive")
    return run_command(PROG, functools.partial(preprocess_now, archive=args.archive,
                                               version=args.version))


if __name__ == "__main__":
    sys.exit(main())
