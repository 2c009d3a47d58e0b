"""Worker processes for CPU-bound work (rule generation, rule parsing), which die with the
process that started them.

A pool worker left behind by a parent killed with SIGKILL would go on computing for nobody,
and (forked) it would hold the parent's database socket open, and with it the parent's
advisory lock, so that the next run finds the job "still running". On Linux the kernel
kills such a worker the moment its parent dies (PR_SET_PDEATHSIG); elsewhere nothing does.

Start methods: a single-threaded command may `fork` (instant start); the server, which has
threads, must `spawn`.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

PR_SET_PDEATHSIG = 1


def process_pool(workers: int, start_method: str) -> ProcessPoolExecutor:
    """A process pool whose workers die with this process."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(start_method),
                               initializer=die_with_parent, initargs=(os.getpid(),))


def die_with_parent(parent_pid: int) -> None:
    """In a child process: SIGKILL when `parent_pid` dies, however it dies. The one place
    that sets it: pool initializer (see process_pool), and the supervisor's children before
    exec (server/process/supervisor.py)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
