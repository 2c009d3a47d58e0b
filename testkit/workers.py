"""The worker processes this process started for a pool (spawned by multiprocessing), as the
operating system sees them."""

from __future__ import annotations

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
