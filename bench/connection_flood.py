"""Connections flooding the service (issue 80, the red team's tenth finding): clients from one
address holding idle connections, opening a new one whenever the service closes one, while an
honest router polls and uploads; its medians against the same requests on the quiet server,
in the same run.

    python -m bench.connection_flood [--idle 42000] [--holders 3] [--workers 2]
                                     [--requests 60] [--compete] [--send]
                                     [--checkout PATH] [--set NAME=VALUE]

The real server (`python -m ops.cli serve`, HTTP_WORKERS=--workers) on an embedded
PostgreSQL. Each holder is a process of its own (its descriptor limit raised to the hard
one) keeping `--idle / --holders` connections open, none sending a byte, and reconnecting
each one the service closes, at the idle scheduling class (SCHED_IDLE): a flood from other
hosts takes none of the service's cores, and holders on its own machine would otherwise
measure what they take of two cores, not what the flood costs the service (`--compete`
runs them at the ordinary class, to see that too). Printed: the honest router's poll and
upload medians quiet and under the flood (and their ratio), how many of the flood's
connections ended a second and the cores the serving processes used meanwhile, and the most
descriptors a worker held against its limit. Without the bound on connections
(server/web/connections.py) the red team's 42,000 idle connections exhausted both workers'
descriptors and honest routers could not connect.

With `--send` each connection sends instead: uploads of one flooding router, one after the
other on its connection as a client that ignores Retry-After does, opening a new
connection whenever the service closes one; past the router's request limit each is a 429
(held TOO_MANY_REQUESTS_DELAY_SECONDS, at most 1,000 at a time a worker, the rest answered
at once and their connection closed). The red team's 4,000 connections from one address
took an honest router's upload median from 5 to 692 ms. The honest router shares the
flood's address (127.0.0.1), so every limit of an address applies to both. Printed as well:
the flood's requests answered a second.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp

from bench.ingest import add_settings_option
from testkit.database import throwaway_database
from testkit.server import memory_kib, running_server

HONEST = "02:80:00:00:00:01"
FLOODER = "02:80:00:00:00:66"
UPLOAD = (b'{"event_type": "alert", "src_ip": "198.51.100.7", "dest_ip": "192.168.1.20", '
          b'"proto": "TCP", "alert": {"signature_id": 2010935, "severity": 2}}\n')
FLOOD_REQUEST = (b"POST /log/events HTTP/1.1\r\nHost: 127.0.0.1\r\nX-ID: " + FLOODER.encode()
                 + b"\r\nContent-Type: application/x-ndjson\r\nContent-Length: "
                 + str(len(UPLOAD)).encode() + b"\r\n\r\n" + UPLOAD)
OPENED_AT_ONCE = 200  # a holder's connections opened concurrently
HOLD_WITHIN_SECONDS = 60.0  # a holder's time to open its connections once each (the
# listening queues refuse some while full), then the honest router is measured


async def sending(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  answered: list[int]) -> None:
    """The flooder's uploads on one connection, each sent once the last was answered, until
    the service closes it."""
    while True:
        writer.write(FLOOD_REQUEST)
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        length = head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0] \
            if b"content-length:" in head else b"0"
        await reader.readexactly(int(length))
        answered[0] += 1
        if b"connection: close" in head:
            return


async def hold(port: int, count: int, compete: bool, send: bool = False) -> None:
    """Keeps `count` idle connections to the service open (or `send`ing, each the
    flooder's uploads); prints "held" once they are, then how many the service closed and
    how many requests it answered, each second. Unless it `compete`s, at the idle
    scheduling class: it takes only the cores the service and the honest router leave."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if not compete:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    closed, connected, answered = 0, 0, [0]
    opening = asyncio.Semaphore(OPENED_AT_ONCE)

    async def one() -> None:
        nonlocal closed, connected
        first = True
        while True:
            try:
                async with opening:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                if first:
                    connected, first = connected + 1, False
                if send:
                    await sending(reader, writer, answered)
                else:
                    await reader.read()  # nothing comes until the service closes it
                writer.close()
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                await asyncio.sleep(0.1)
            closed += 1

    tasks = [asyncio.create_task(one()) for _ in range(count)]
    deadline = time.monotonic() + HOLD_WITHIN_SECONDS
    while connected < count and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    print(f"held {connected}", flush=True)
    while True:
        await asyncio.sleep(1)
        print(f"closed {closed} {answered[0]}", flush=True)
    await asyncio.gather(*tasks)


async def honest(url: str, requests: int) -> tuple[float, float, int]:
    """Median seconds of a poll and of an upload, each on a new connection (as an agent
    that lost its connection to the flood reconnects), and how many failed (no connection,
    or not answered 200 within 10 s)."""
    polls, uploads, failed = [], [], 0
    timeout = aiohttp.ClientTimeout(total=10)
    for _ in range(requests):
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for took, asked in ((polls, session.get(f"{url}/rules/last_updated",
                                                    headers={"X-ID": HONEST})),
                                (uploads, session.post(f"{url}/log/events", data=UPLOAD,
                                                       headers={"X-ID": HONEST,
                                                                "Content-Type":
                                                                "application/x-ndjson"}))):
                started = time.monotonic()
                try:
                    async with asked as answer:
                        await answer.read()
                        ok = answer.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                if ok:
                    took.append(time.monotonic() - started)
                failed += not ok
        await asyncio.sleep(0.05)
    return (statistics.median(polls) if polls else float("nan"),
            statistics.median(uploads) if uploads else float("nan"), failed)


def cpu_seconds(pids: list[int]) -> float:
    """User and system time the processes have used."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def follow_closed(holder: subprocess.Popen, counts: dict[int, tuple[int, int]]) -> None:
    """Keeps `counts[holder.pid]` at the holder's latest counts of connections the service
    closed and requests it answered (it prints them each second), in a thread of its own."""
    def read() -> None:
        assert holder.stdout is not None
        for line in holder.stdout:
            if line.startswith("closed"):
                counts[holder.pid] = (int(line.split()[1]), int(line.split()[2]))
    threading.Thread(target=read, daemon=True).start()


def descriptors(pids: list[int]) -> int:
    return max(len(os.listdir(f"/proc/{pid}/fd")) for pid in pids)


def descriptor_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise LookupError("no descriptor limit in /proc")


def totals(counts: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """The holders' connections closed and requests answered, summed."""
    return (sum(closed for closed, _ in counts.values()),
            sum(answered for _, answered in counts.values()))


def run(idle: int, holders: int, workers: int, requests: int, settings: dict,
        checkout: Path | None, compete: bool, send: bool) -> dict:
    other = {} if checkout is None else {"checkout": checkout,
                                         "python": str(checkout / ".venv" / "bin" / "python")}
    with throwaway_database() as (location, workdir):
        # The flood limits on when it sends (they refuse it), the honest router's allowance
        # its own requests, quiet and flooded, within a minute (the flooder's thousands a
        # second are refused all the same).
        honest_allowance = {"ROUTER_REQUESTS_PER_MINUTE": str(max(120, 4 * requests))} \
            if send else {}
        with running_server(location, workdir, flood_limits=send, HTTP_WORKERS=str(workers),
                            **other, **{**honest_allowance, **settings}) as server:
            serving = server.children("serving") if workers > 1 else [server.process.pid]
            quiet = asyncio.run(honest(server.url, requests))
            rss_quiet = max(memory_kib(pid, "VmRSS") for pid in serving)
            started = [subprocess.Popen(
                [sys.executable, "-m", "bench.connection_flood", "--hold", str(server.port),
                 str(idle // holders), *(["--compete"] if compete else []),
                 *(["--send"] if send else [])],
                stdout=subprocess.PIPE, text=True,
                cwd=Path(__file__).resolve().parent.parent) for _ in range(holders)]
            try:
                held = sum(int(holder.stdout.readline().split()[1]) for holder in started)
                counts: dict[int, tuple[int, int]] = {}
                for holder in started:
                    follow_closed(holder, counts)
                most = descriptors(serving)
                time.sleep(1.1)  # the holders' first counts
                (closed_before, answered_before), cpu_before = totals(counts), \
                    cpu_seconds(serving)
                began = time.monotonic()
                flooded = asyncio.run(honest(server.url, requests))
                took = time.monotonic() - began
                time.sleep(1.1)  # the holders' next count
                closed, answered = (now - before for now, before in zip(
                    totals(counts), (closed_before, answered_before)))
                cores = (cpu_seconds(serving) - cpu_before) / took
                most = max(most, descriptors(serving))
                rss_flooded = max(memory_kib(pid, "VmRSS") for pid in serving)
                limit = descriptor_limit(serving[0])
                bound = [line.rsplit("at most", 1)[1].split()[0]
                         for line in server.log_tail(1_000_000).splitlines()
                         if "holding at most" in line] or ["no bound"]
            finally:
                for holder in started:
                    holder.kill()
                    holder.wait()
    return {"quiet": quiet, "flooded": flooded, "closed": closed, "answered": answered,
            "descriptors": most,
            "held": held, "seconds": took, "cores": cores,
            "limit": limit, "bound": bound[-1], "rss": (rss_quiet, rss_flooded)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=42_000)
    parser.add_argument("--holders", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--hold", nargs=2, type=int, metavar=("PORT", "COUNT"),
                        help="be one holder: keep COUNT idle connections to PORT open")
    parser.add_argument("--compete", action="store_true",
                        help="holders at the ordinary scheduling class, competing with the "
                             "service for this machine's cores (default: the idle class, as "
                             "a flood from other hosts takes none of them)")
    parser.add_argument("--send", action="store_true",
                        help="each connection sends a flooding router's uploads, one after "
                             "the other, instead of staying idle")
    parser.add_argument("--checkout", type=Path, default=None,
                        help="run another checkout's server (the release before), with the "
                             "virtualenv in it")
    add_settings_option(parser)
    args = parser.parse_args()
    if args.hold:
        asyncio.run(hold(*args.hold, args.compete, args.send))
        return 0
    r = run(args.idle, args.holders, args.workers, args.requests, dict(args.set),
            args.checkout, args.compete, args.send)
    (poll, upload, _), (flood_poll, flood_upload, failed) = r["quiet"], r["flooded"]
    print(f"{args.idle:,} {'sending' if args.send else 'idle'} connections from "
          f"{args.holders} holders on 127.0.0.1, "
          f"HTTP_WORKERS={args.workers}, each worker holding at most {r['bound']}"
          f"{f' (the server of {args.checkout})' if args.checkout else ''}; holders at "
          f"{'the ordinary' if args.compete else 'the idle'} scheduling class")
    print(f"connections opened at least once: {r['held']:,}; honest requests that failed "
          f"under the flood: {failed} of {2 * args.requests}")
    print(f"honest poll median: quiet {poll * 1e3:.1f} ms, flooded {flood_poll * 1e3:.1f} ms "
          f"({flood_poll / poll:.2f}×)")
    print(f"honest upload median: quiet {upload * 1e3:.1f} ms, flooded "
          f"{flood_upload * 1e3:.1f} ms ({flood_upload / upload:.2f}×)")
    print(f"while the honest router was measured ({r['seconds']:.1f} s): "
          f"{r['closed'] / r['seconds']:,.0f} of the flood's connections ended a second "
          f"(closed by the service's idle timer or bound, or refused by a full listening "
          f"queue) and were opened again, {r['answered'] / r['seconds']:,.0f} of its "
          f"requests answered a second; the serving processes "
          f"used {r['cores']:.2f} cores; most descriptors a worker held: "
          f"{r['descriptors']:,} of its {r['limit']:,}; a worker's RSS at most "
          f"{r['rss'][0] / 1024:.0f} MiB quiet, {r['rss'][1] / 1024:.0f} MiB flooded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
