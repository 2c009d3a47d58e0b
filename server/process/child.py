"""One process of the service: all of it (`router-backend serve` with HTTP_WORKERS=1, which
calls `run`), or one of the supervisor's children, which it starts by this module's own
entry, not by flags of the operators' command:

    python -m server.process.child http --metrics-dir DIR --listen-fds FDS --console-fds FDS
    python -m server.process.child background --metrics-dir DIR

`http`: an HTTP worker, serving from the sockets it inherits; `background`: the host's one
process for the generation queue, the scheduled jobs, the hunt indexer and the notification
retries. The settings come from the environment the supervisor hands down.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import socket
import sys

from server.app import create_app
from server.db import service_settings
from server.db.migrate import SchemaNotReady
from server.db.service_settings import CONSOLE_SECRET_SET
from server.logs import configure_logging
from server.process.shutdown import Inherited, run_until_stopped, serve_until_stopped
from server.settings import Settings, SettingsError, load_settings, shared_with_commands
from server.typedefs import DATABASE, IN_FLIGHT

CHILD_ROLES = ("http", "background")


async def record_settings(settings: Settings, app) -> None:
    """The settings this start runs with, for the operator commands (ops/command.py)."""
    values = {name: value for name, value in settings.given if shared_with_commands(name)}
    if settings.console_secret:  # that it is set, never what it is
        values[CONSOLE_SECRET_SET] = "true"
    await service_settings.record(app[DATABASE], values, f"{socket.gethostname()}:{os.getpid()}")


def run(settings: Settings, role: str, metrics_dir: str | None = None,
        inherited: Inherited | None = None) -> int:
    """Serve as `role` (all, http or background) until stopped."""
    app = create_app(settings, role, metrics_dir)
    if role != "http":  # the one process that runs the jobs: recorded once a start
        app.on_startup.append(functools.partial(record_settings, settings))
    if role == "background":
        asyncio.run(run_until_stopped(app))
    else:
        asyncio.run(serve_until_stopped(app, app[IN_FLIGHT], settings.listen_host,
                                        settings.listen_port, settings.shutdown_grace_seconds,
                                        settings.http_idle_timeout_seconds, inherited))
    return 0


def command(role: str, metrics_dir: str, listen_fds: str = "",
            console_fds: str = "") -> list[str]:
    """How the supervisor starts a child."""
    started = [sys.executable, "-m", "server.process.child", role, "--metrics-dir", metrics_dir]
    if role == "http":
        started += ["--listen-fds", listen_fds, "--console-fds", console_fds]
    return started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.process.child",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=CHILD_ROLES)
    parser.add_argument("--metrics-dir", required=True,
                        help="the supervisor's multiprocess metrics directory")
    parser.add_argument("--listen-fds", default="",
                        help="the inherited listening sockets (http)")
    parser.add_argument("--console-fds", default="",
                        help="the inherited console sockets (http)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        configure_logging(settings.log_config)
        inherited = Inherited.from_fds(args.listen_fds, args.console_fds) \
            if args.role == "http" else None
        return run(settings, args.role, args.metrics_dir, inherited)
    except SettingsError as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 2
    except (SchemaNotReady, OSError) as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
