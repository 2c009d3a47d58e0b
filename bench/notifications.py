"""Notification benchmark against a local aiosmtpd sink.

    python -m bench.notifications [--sends 1000] [--concurrency 8] [--feed 100000]

Runs the real server (notification API only) as a subprocess on an embedded PostgreSQL and:
1. POSTs N notifications end to end (validate, store, deliver over SMTP, mark sent) and, as
   reference in the same run, sends N messages straight to the same sink with aiosmtplib;
   prints notifications/s of both, their ratio, and the POST latency p50/p99;
2. POSTs N more, each with its own `Idempotency-Key`, and prints their rate against the
   keyless run (rounds alternate, best of each kept);
3. fills one user's feed with 100,000 notifications (a third of them read) and times listing
   pages, with the `unread` count, over HTTP at offsets spread through the feed, against the
   same queries run directly with psycopg; prints listing p50/p99 of both.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from email.message import EmailMessage

import aiohttp
import aiosmtplib
from aiosmtpd.controller import Controller

from server.db.connect import connect
from server.notify.sql import COUNTS, PAGE_STATEMENTS
from testkit.database import throwaway_database
from testkit.server import free_port, running_server


class Sink:
    async def handle_DATA(self, server, session, envelope):
        return "250 OK"


def quantile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000


async def post_all(port: int, count: int, concurrency: int, keyed: bool = False,
                   first: int = 0) -> tuple[float, list[float]]:
    """POST `count` sends numbered from `first`; `keyed`: each with its own Idempotency-Key."""
    latencies: list[float] = []
    remaining = list(range(first, first + count))

    async def worker(session: aiohttp.ClientSession) -> None:
        while remaining:
            n = remaining.pop()
            body = {"userId": f"user-{n % 50}", "recipient": f"user{n}@example.org",
                    "projectId": f"project-{n}"}
            headers = {"Idempotency-Key": f"bench-{n}"} if keyed else {}
            started = time.perf_counter()
            async with session.post(f"http://127.0.0.1:{port}/api/notifications/scan-failed",
                                    json=body, headers=headers) as response:
                if response.status != 200:
                    raise RuntimeError(f"{response.status}: {await response.text()}")
            latencies.append(time.perf_counter() - started)

    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        return time.perf_counter() - started, latencies


async def smtp_direct(port: int, count: int, concurrency: int) -> float:
    remaining = list(range(count))

    async def worker() -> None:
        while remaining:
            n = remaining.pop()
            message = EmailMessage()
            message["From"], message["To"] = "bench@example.org", f"user{n}@example.org"
            message["Subject"] = f"Scan failed for project project-{n}"
            message.set_content("The scan failed.")
            await aiosmtplib.send(message, hostname="127.0.0.1", port=port,
                                  use_tls=False, start_tls=False)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


def fill_feed(location, user: str, count: int) -> None:
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "INSERT INTO notifications (id, user_id, type, title, message, recipient, "
                "status, created_at) SELECT gen_random_uuid(), %s, 'scan_failed', "
                "'Scan failed for project p' || n, 'm', 'x@example.org', 'sent', "
                "now() - n * interval '1 second' FROM generate_series(1, %s) n", (user, count))
            cur.execute("UPDATE notifications SET read = true WHERE user_id = %s "
                        "AND random() < 0.33", (user,))
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("VACUUM ANALYZE notifications")
    finally:
        conn.close()


async def list_http(port: int, user: str, offsets: list[int]) -> list[float]:
    latencies = []
    async with aiohttp.ClientSession() as session:
        for offset in offsets:
            started = time.perf_counter()
            async with session.get(f"http://127.0.0.1:{port}/api/workflow/users/{user}/"
                                   f"notifications", params={"limit": "20",
                                                             "offset": str(offset)}) as reply:
                await reply.read()
                assert reply.status == 200
            latencies.append(time.perf_counter() - started)
    return latencies


def list_direct(location, user: str, offsets: list[int]) -> list[float]:
    conn = connect(location)
    latencies = []
    try:
        with conn.cursor() as cur:
            for offset in offsets:
                started = time.perf_counter()
                cur.execute(COUNTS, (user,))
                cur.fetchone()
                cur.execute(PAGE_STATEMENTS[None], {"user": user, "limit": 20,
                                                   "offset": offset})
                cur.fetchall()
                latencies.append(time.perf_counter() - started)
    finally:
        conn.close()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--feed", type=int, default=100_000)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sink = Controller(Sink(), hostname="127.0.0.1", port=free_port())
    sink.start()
    try:
        with throwaway_database() as (location, workdir), running_server(
                location, workdir, SERVICES="notifications", SMTP_HOST="127.0.0.1",
                SMTP_PORT=str(sink.port), SMTP_SECURITY="none") as server:
            seconds, latencies = asyncio.run(post_all(server.port, args.sends, args.concurrency))
            direct = asyncio.run(smtp_direct(sink.port, args.sends, args.concurrency))
            rate, direct_rate = args.sends / seconds, args.sends / direct
            print(f"send end to end: {rate:7.0f} notifications/s, POST p50 "
                  f"{quantile(latencies, 50):.1f} ms, p99 {quantile(latencies, 99):.1f} ms")
            print(f"SMTP sends alone: {direct_rate:6.0f} messages/s; ratio {rate / direct_rate:.2f}")
            plain, keyed = [], []
            for round_ in range(args.rounds):
                first = (2 * round_ + 1) * args.sends
                plain.append(asyncio.run(post_all(server.port, args.sends, args.concurrency,
                                                  first=first))[0])
                keyed.append(asyncio.run(post_all(server.port, args.sends, args.concurrency,
                                                  keyed=True, first=first + args.sends))[0])
            print(f"with Idempotency-Key: {args.sends / min(keyed):6.0f} /s vs "
                  f"{args.sends / min(plain):6.0f} /s without (best of {args.rounds}): "
                  f"ratio {min(plain) / min(keyed):.2f}")
            fill_feed(location, "busy-user", args.feed)
            rng = random.Random(3)
            offsets = [rng.choice([0, 0, 0, 20, 100, 1000, 10_000, 50_000])
                       for _ in range(args.pages)]
            http = asyncio.run(list_http(server.port, "busy-user", offsets))
            raw = list_direct(location, "busy-user", offsets)
            print(f"listing with unread, {args.feed} notifications: HTTP p50 {quantile(http, 50):.1f} ms, "
                  f"p99 {quantile(http, 99):.1f} ms; the same SQL directly p50 "
                  f"{quantile(raw, 50):.1f} ms, p99 {quantile(raw, 99):.1f} ms")
    finally:
        sink.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
