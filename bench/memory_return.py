"""What a flood of refused uploads leaves in a worker's memory (issue 80, the red team's tenth
finding: 116 → 420 MB, never returned): `--clients` clients post `--size`-byte bodies as one
router for `--seconds`, each refused (429, held TOO_MANY_REQUESTS_DELAY_SECONDS), then the
worker's RSS is read every second until it is back within `--margin` MiB of where it began,
or `--wait` seconds pass.

    python -m bench.memory_return [--clients 300] [--seconds 20] [--size 1000000]
                                  [--wait 60] [--checkout PATH] [--set NAME=VALUE]

The reference, in the same run: the worker's RSS when the flood ended (what it grew by).
Printed: RSS before, at the end, and when it came back (or at `--wait`), the answers, and
the share of the growth still held. The real server (`python -m ops.cli serve`, one
process) on an embedded PostgreSQL; `--checkout`: another checkout's server (the release
before), with its own `.venv`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import time
from pathlib import Path

import aiohttp

from bench.ingest import add_settings_option
from testkit.database import throwaway_database
from testkit.server import memory_kib, running_server

FLOODER = "02:80:00:00:0f:01"
REFUSING = {"ROUTER_REQUESTS_PER_MINUTE": "1", "TOO_MANY_REQUESTS_DELAY_SECONDS": "2"}


def rss_mib(pid: int) -> int:
    return memory_kib(pid, "VmRSS") // 1024


async def flood(url: str, clients: int, seconds: float, size: int) -> collections.Counter:
    """Each client posts the body again as soon as it is answered; the answers counted."""
    record = b'{"event_type": "alert", "flow_id": 1}\n'
    body = record * (size // len(record))
    answers: collections.Counter = collections.Counter()
    ends = time.monotonic() + seconds
    headers = {"X-ID": FLOODER, "Content-Type": "application/x-ndjson"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def client() -> None:
            while time.monotonic() < ends:
                try:
                    async with session.post(f"{url}/log/events", data=body,
                                            headers=headers) as answer:
                        answers[answer.status] += 1
                except aiohttp.ClientError as error:
                    answers[type(error).__name__] += 1
        await asyncio.gather(*(client() for _ in range(clients)))
    return answers


async def came_back(pid: int, within: int, wait: float) -> tuple[int, float]:
    """The RSS once it is at most `within` MiB, or at `wait` seconds; and when."""
    started = time.monotonic()
    while (rss := rss_mib(pid)) > within and time.monotonic() - started < wait:
        await asyncio.sleep(1)
    return rss, time.monotonic() - started


def run(clients: int, seconds: float, size: int, wait: float, margin: int,
        settings: dict[str, str], checkout: Path | None) -> dict:
    other = {} if checkout is None else {"checkout": checkout,
                                         "python": str(checkout / ".venv" / "bin" / "python")}
    with throwaway_database() as (location, workdir), running_server(
            location, workdir / "server", **other, **{**REFUSING, **settings}) as server:
        pid = server.process.pid
        before = rss_mib(pid)
        answers = asyncio.run(flood(server.url, clients, seconds, size))
        ended = rss_mib(pid)
        after, took = asyncio.run(came_back(pid, before + margin, wait))
    return {"before": before, "ended": ended, "after": after, "took": took,
            "answers": dict(answers)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--wait", type=float, default=60)
    parser.add_argument("--margin", type=int, default=20, help="MiB above the start")
    parser.add_argument("--checkout", type=Path, default=None)
    add_settings_option(parser)
    args = parser.parse_args()
    result = run(args.clients, args.seconds, args.size, args.wait, args.margin,
                 dict(args.set), args.checkout)
    grown = result["ended"] - result["before"]
    held = (result["after"] - result["before"]) / grown if grown > 0 else 0.0
    print(f"answers {result['answers']}; worker RSS {result['before']} MiB before, "
          f"{result['ended']} MiB when the flood ended, {result['after']} MiB "
          f"{result['took']:.0f} s later: {held:.2f} of the growth still held"
          f"{f' (the server of {args.checkout})' if args.checkout else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
