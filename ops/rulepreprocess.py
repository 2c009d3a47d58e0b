"""`rulepreprocess`: run the rule preprocess job once, now (progress on stderr, summary on
stdout; exit 0 when the ruleset is published or already current, 1 on failure)."""

from __future__ import annotations

import argparse
import sys

from ops.command import CommandError, run_command
from server.db.pool import Database
from server.jobs.cron import run_job
from server.jobs.preprocess import run_preprocess
from server.settings import Settings

PROG = "rulepreprocess"


def progress(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


async def preprocess_now(settings: Settings, db: Database) -> int:
    results = []

    async def job() -> dict:
        result = await run_preprocess(settings, start_method="fork", progress=progress)
        results.append(result)
        return result.as_detail()

    outcome = await run_job(db, PROG, job)
    if outcome.status == "skipped":
        raise CommandError("another preprocess run is in progress; try again later")
    if outcome.status == "failed":
        raise CommandError(f"{outcome.error} (the previous ruleset stays in use)")
    print(results[0].summary())
    return 0


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0]).parse_args(argv)
    return run_command(PROG, preprocess_now)


if __name__ == "__main__":
    sys.exit(main())
