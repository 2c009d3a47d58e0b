"""The `router-agent` command.

    router-agent --config /etc/router-agent.ini run [--once]
    router-agent --config /etc/router-agent.ini status

`run` uploads eve.json every upload_seconds and polls for rules every poll_seconds until
stopped (SIGTERM or SIGINT; every file it writes is replaced atomically, so stopping it at
any moment loses nothing). `--once` does one round of each and exits, for cron: 0 when
everything went through, 75 (EX_TEMPFAIL) when the server could not be reached (the batches
wait in the spool), 1 when something was refused. `status` prints what the agent knows as
JSON. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import signal
import sys
import time
from pathlib import Path

from agent.client import Backoff, Refused, ServiceClient, Unavailable
from agent.config import AgentConfig, ConfigError, load_config
from agent.enforcement import EnforcementReporter
from agent.enrollment import router_key
from agent.rules import RuleUpdater
from agent.spool import Spool
from agent.state import AgentState
from agent.uploads import Uploader

log = logging.getLogger("router_agent")

EX_TEMPFAIL = 75
SEND_BETWEEN_READS = 20  # batches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="router-agent", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=Path("/etc/router-agent.ini"))
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="upload telemetry and apply rules")
    run_parser.add_argument("--once", action="store_true", help="one round, then exit")
    commands.add_parser("status", help="print the agent's state as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as error:
        log.error("%s", error)
        return 1
    config.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if args.command == "status":
        print(json.dumps(status(config), indent=1))
        return 0
    return Agent(config).run(once=args.once)


def status(config: AgentConfig) -> dict:
    state = AgentState.load(config.state_dir).values
    batches = Spool(config.state_dir / "spool", config.spool_max_bytes).batches()
    return {"spool": {"batches": len(batches), "records": sum(b.records for b in batches),
                      "bytes": sum(b.size for b in batches)},
            "last_upload_at": state["last_upload_at"],
            "applied": state["applied"], "failed": state["failed"],
            "last_apply": state["last_apply"], "last_error": state["last_error"],
            "position": state["position"], "counters": state["counters"]}


class Agent:
    def __init__(self, config: AgentConfig):
        self.config = config
        self.state = AgentState.load(config.state_dir)
        self.client = ServiceClient(config)
        self.enforcement = EnforcementReporter(config, self.client)
        self.uploader = Uploader(config, self.state, self.client, self.enforcement)
        self.rules = RuleUpdater(config, self.state, self.client, self.enforcement)

    def run(self, once: bool = False) -> int:
        signal.signal(signal.SIGTERM, _stop)
        try:
            time.sleep(random.uniform(0, self.config.start_delay_max_seconds))
            return self.round() if once else self._loop()
        except KeyboardInterrupt:  # SIGTERM or SIGINT: every file is whole at any moment
            log.info("stopped")
            return 0

    def _loop(self) -> int:
        upload_backoff = Backoff(self.config.retry_max_seconds)
        poll_backoff = Backoff(self.config.retry_max_seconds)
        send_at = poll_at = time.monotonic()
        while True:
            self._collect()
            if time.monotonic() >= send_at:
                send_at = time.monotonic() + self._step(self._send, upload_backoff,
                                                        self.config.upload_seconds)
            if time.monotonic() >= poll_at:
                poll_at = time.monotonic() + self._step(self._poll, poll_backoff,
                                                        self.config.poll_seconds)
            time.sleep(max(0.0, min(send_at, poll_at,
                                    time.monotonic() + self.config.upload_seconds)
                           - time.monotonic()))

    def round(self) -> int:
        """One collection, send and poll: the exit status of --once."""
        statuses = [0]
        for step in (self._collect, self._send, self._poll):
            try:
                step()
            except Unavailable as error:
                self._failed(f"server unavailable: {error}")
                statuses.append(EX_TEMPFAIL)
            except Refused as error:
                self._failed(f"refused: {error}")
                statuses.append(1)
        return 1 if 1 in statuses else max(statuses)

    def _collect(self) -> None:
        try:
            self.uploader.collect()
        except OSError as error:  # eve.json unreadable, the disk full: try again later
            self._failed(f"reading {self.config.eve_json} into the spool: {error}")

    def _send(self) -> None:
        """The whole spool, reading eve.json between stretches: a long backlog must not
        leave the reading so far behind that rotated files are deleted unread."""
        self.client.key = router_key(self.config, self.client)
        while self.uploader.send(max_batches=SEND_BETWEEN_READS):
            self._collect()

    def _poll(self) -> None:
        self.client.key = router_key(self.config, self.client)
        self.rules.poll()
        if self.enforcement.due():
            self.enforcement.report()

    def _step(self, step, backoff: Backoff, interval: float) -> float:
        """Run one step; the seconds until the next: its interval, or a backoff."""
        try:
            step()
        except Unavailable as error:
            wait = backoff.failed(error.retry_after)
            self._failed(f"server unavailable: {error}; trying again in {wait:.0f}s")
            return wait
        except Refused as error:
            self._failed(f"refused: {error}")
            return interval
        backoff.succeeded()
        return interval

    def _failed(self, message: str) -> None:
        log.warning("%s", message)
        self.state.error(message)
        self.state.save()


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
