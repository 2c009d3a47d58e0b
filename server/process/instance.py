"""One service per data directory: the service (the single process, or the supervisor) holds
an exclusive lock on `DATA_DIR/service.lock` for as long as it runs, with its PID and address
written in the file. A second `serve` on the same DATA_DIR, on any port, stops before it
touches anything (the embedded database, the metrics directory, the port) with one line
naming the running one. The lock dies with its process (flock), so a killed service never
blocks the next start. Operator commands do not take it: they run beside the service."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from server.settings import Settings


class AlreadyRunning(OSError):
    """Another service holds the data directory; the message names it."""


@contextlib.contextmanager
def only_service_on(settings: Settings, doing: str | None = None) -> Iterator[None]:
    """Hold DATA_DIR for the service, or for a command that must run alone on it (`doing`
    says what it does, for the message a start meanwhile prints)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    path = settings.data_dir / "service.lock"
    with open(path, "a+") as lock:  # not inherited by children (Python's default)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyRunning(_running_one(path, settings.data_dir)) from None
        lock.truncate(0)
        lock.write(f"{os.getpid()} "
                   f"{doing or f'listening on {settings.listen_host}:{settings.listen_port}'}\n")
        lock.flush()
        yield


def _running_one(path: Path, data_dir: Path) -> str:
    pid, _, doing = path.read_text().strip().partition(" ")
    return (f"another service (pid {pid or '?'}, {doing or 'starting'}) runs on "
            f"DATA_DIR {data_dir.resolve()}: stop it first, or give this one a DATA_DIR of "
            "its own")
