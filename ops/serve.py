"""`router-backend serve` (the default command): the service, as one process doing everything
(HTTP_WORKERS=1) or as the supervisor of HTTP_WORKERS workers, which starts its children by
their own entry (server/process/child.py)."""

from __future__ import annotations

import argparse

from ops.command import Command
from server.exposure import refuse_unchosen
from server.process.child import run as run_process
from server.process.instance import only_service_on
from server.process.supervisor import Supervisor, refuse_taken_listeners
from server.settings import Settings


def positive_integer(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {number}")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=positive_integer, default=None,
                        help="HTTP worker processes (default: HTTP_WORKERS)")


def serve(settings: Settings, args: argparse.Namespace) -> int:
    refuse_unchosen(settings)
    with only_service_on(settings):
        refuse_taken_listeners(settings)  # before the database is made or touched
        workers = getattr(args, "workers", None) or settings.http_workers
        if workers > 1:
            return Supervisor(settings, workers).run()
        return run_process(settings)


COMMAND = Command("serve", "run the HTTP service (the default)", add_arguments, serve)
