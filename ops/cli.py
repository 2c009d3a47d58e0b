"""`router-backend`: run the service (`serve`, the default)."""

from __future__ import annotations

import argparse
import logging
import sys

from aiohttp import web

from server.app import create_app
from server.settings import SettingsError, load_settings

ACCESS_LOG_FORMAT = '%a "%r" %s %b %Tfs "%{X-ID}i"'


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def serve() -> int:
    settings = load_settings()
    app = create_app(settings)
    web.run_app(app, host=settings.listen_host, port=settings.listen_port,
                access_log_format=ACCESS_LOG_FORMAT, print=None,
                shutdown_timeout=30)
    return 0


COMMANDS = {"serve": serve}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="router-backend",
                                     description="Router IDS backend and notification service.")
    parser.add_argument("command", nargs="?", default="serve", choices=sorted(COMMANDS),
                        help="what to run (default: serve)")
    args = parser.parse_args(argv)
    configure_logging()
    try:
        return COMMANDS[args.command]()
    except SettingsError as error:
        print(f"router-backend: {error}", file=sys.stderr)
        return 2
    except ConnectionError as error:
        print(f"router-backend: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
