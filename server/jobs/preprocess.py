"""The rule preprocess job: ruledata's pipeline (version check, download, verify, parse,
weight, publish) with the settings' source and directory, parsing in a pool of processes."""

from __future__ import annotations

import os
from typing import Callable

from engine.processes import process_pool
from ruledata.preprocess import PreprocessError, PreprocessResult, RuleSource, preprocess
from server.jobs.cron import JobFailed
from server.settings import Settings

MAX_PARSE_WORKERS = 8


def rule_source(settings: Settings) -> RuleSource:
    return RuleSource(settings.rule_preprocess_archive_url, settings.rule_preprocess_version_url)


async def run_preprocess(settings: Settings, start_method: str | None = None,
                         progress: Callable[[str], None] = lambda _: None,
                         source: RuleSource | None = None) -> PreprocessResult:
    """One run, from the settings' feed unless another `source` is given. With a start
    method (`fork` for a command, `spawn` in the server, which has threads), files are parsed
    in a pool of processes, one per core (at most 8); without one, in a thread of this
    process. JobFailed (one line, no traceback) for the run's expected failures: the feed
    unreachable, the archive damaged."""
    source = source or rule_source(settings)
    try:
        if start_method is None:
            return await preprocess(settings.rule_data_path, source, progress)
        workers = max(1, min(os.cpu_count() or 1, MAX_PARSE_WORKERS))
        with process_pool(workers, start_method) as pool:
            return await preprocess(settings.rule_data_path, source, progress, pool)
    except PreprocessError as error:
        raise JobFailed(str(error)) from None
