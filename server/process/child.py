"""One process of the service: every part of it (`router-backend serve` with
HTTP_WORKERS=1, which calls `run`), or one of the supervisor's children, which it starts by
this module's own entry, not by flags of the operators' command:

    python -m server.process.child serving --metrics-dir DIR --listen-fds FDS --console-fds FDS
                                           --host-tables FILE
    python -m server.process.child working --metrics-dir DIR

`serving`: an HTTP worker, serving from the sockets it inherits; `working`: the host's one
process for the generation queue, the scheduled jobs, the hunt indexer and the notification
retries (server/app.py SERVING, WORKING). The settings come from the environment the
supervisor hands down.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import socket
import sys

from server.app import (EVERYTHING, SERVING, WORKING, Part, Resources, connections_needed,
                        contexts, create_app, resources)
from server.db import service_settings
from server.db.service_settings import CONSOLE_SECRET_SET
from server.logs import configure_logging
from server.process.memory import memory_return_context
from server.process.shutdown import Inherited, run_until_stopped, serve_until_stopped
from server.process.exits import reported
from server.settings import Settings, load_settings, shared_with_commands
from server.typedefs import DATABASE, IN_FLIGHT

CHILDREN = {part.name: part for part in (SERVING, WORKING)}


async def record_settings(settings: Settings, resources: Resources) -> None:
    """The settings this start runs with, for the operator commands (ops/command.py)."""
    values = {name: value for name, value in settings.given if shared_with_commands(name)}
    if settings.console_secret:  # that it is set, never what it is
        values[CONSOLE_SECRET_SET] = "true"
    await service_settings.record(resources[DATABASE], values,
                                  f"{socket.gethostname()}:{os.getpid()}")


def run(settings: Settings, parts: tuple[Part, ...] = EVERYTHING,
        metrics_dir: str | None = None, inherited: Inherited | None = None,
        host_tables: str | None = None) -> int:
    """Run these parts until stopped: a lone process (every part) migrates first. A process
    that serves nothing runs its contexts without an aiohttp application. `host_tables`: the
    supervisor's file of the flood limits its HTTP workers share."""
    migrate = parts == EVERYTHING
    if not any(part.serves for part in parts):
        held = resources(settings, parts, metrics_dir)
        asyncio.run(run_until_stopped(
            held, [*contexts(settings, parts, metrics_dir, migrate), memory_return_context],
            functools.partial(record_settings, settings, held) if WORKING in parts
            else _nothing))
        return 0
    app = create_app(settings, parts, metrics_dir, migrate=migrate, host_tables=host_tables)
    app.cleanup_ctx.append(memory_return_context)
    if WORKING in parts:  # the one process that runs the jobs: recorded once a start
        app.on_startup.append(lambda app: record_settings(settings, app))
    asyncio.run(serve_until_stopped(app, app[IN_FLIGHT], settings.listen_host,
                                    settings.listen_port, settings.shutdown_grace_seconds,
                                    settings.http_idle_timeout_seconds, inherited,
                                    connections_needed(settings, parts)))
    return 0


async def _nothing() -> None:
    return None


def command(part: Part, metrics_dir: str, listen_fds: str = "",
            console_fds: str = "", host_tables: str = "") -> list[str]:
    """How the supervisor starts a child running `part`."""
    started = [sys.executable, "-m", "server.process.child", part.name,
               "--metrics-dir", metrics_dir]
    if part.serves:
        started += ["--listen-fds", listen_fds, "--console-fds", console_fds,
                    "--host-tables", host_tables]
    return started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.process.child",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=sorted(CHILDREN))
    parser.add_argument("--metrics-dir", required=True,
                        help="the supervisor's multiprocess metrics directory")
    parser.add_argument("--listen-fds", default="",
                        help="the inherited listening sockets (serving)")
    parser.add_argument("--console-fds", default="",
                        help="the inherited console sockets (serving)")
    parser.add_argument("--host-tables", default="",
                        help="the flood limits' file the HTTP workers share (serving)")
    args = parser.parse_args(argv)

    def run_part() -> int:
        settings = load_settings()
        configure_logging(settings.log_config)
        part = CHILDREN[args.part]
        inherited = Inherited.from_fds(args.listen_fds, args.console_fds) \
            if part.serves else None
        return run(settings, (part,), args.metrics_dir, inherited, args.host_tables or None)
    # Ctrl-C reaches the supervisor too, which says so once.
    return reported(parser.prog, run_part, say_interrupted=False)


if __name__ == "__main__":
    sys.exit(main())
