"""Processes as the operating system sees them: the worker processes this process started for
a pool (spawned by multiprocessing), and whatever runs on a directory (a server, an initdb)."""

from __future__ import annotations

from pathlib import Path

import psutil


def pool_worker_pids() -> set[int]:
    """Process ids of this process's live children started by multiprocessing's spawn."""
    pids = set()
    for child in psutil.Process().children():
        try:
            if "spawn_main" in " ".join(child.cmdline()) and \
                    child.status() != psutil.STATUS_ZOMBIE:
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return pids


def processes_on(directory: Path) -> list[psutil.Process]:
    """Every process whose command line names `directory` (an embedded server on its data
    directory, an initdb, a service with its DATA_DIR)."""
    return [process for process in psutil.process_iter(["cmdline"])
            if process.info["cmdline"]
            and str(directory) in " ".join(process.info["cmdline"])]
