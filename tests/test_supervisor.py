"""`router-backend serve` with HTTP_WORKERS > 1: HTTP workers under one supervisor, one
background process for the host's generation queue, jobs and retries, host-wide metrics, a
killed worker replaced, SIGTERM draining every worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest

from server.metrics import REQUEST_RECORD_SECONDS
from server.process.supervisor import MAX_DELAY_SECONDS, RESTART_BURST, restart_delay
from testkit import REPOSITORY
from testkit.database import Sql, database_env
from testkit.server import ServerRunner
from testkit.waiting import wait_for
from testkit.telemetry import stored_count

WORKERS = 2


async def refusing(port: int) -> bool:
    """Whether a connection to the port on loopback is refused."""
    try:
        connection = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", port), 1)
    except OSError:
        return True
    connection.close()
    return False


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples in a Prometheus exposition."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
            found = True
    assert found, f"{name} not in the exposition"
    return total


async def scrape(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(f"{url}/metrics") as response:
        assert response.status == 200
        return await response.text()


@pytest.fixture
def supervised(database, tmp_path):
    server = ServerRunner(database, tmp_path, HTTP_WORKERS=str(WORKERS)).start()
    assert server.every_worker_serving()
    yield server
    if server.process.poll() is None:
        server.stop()


async def test_workers_serve_and_one_scrape_reports_the_host(supervised, database):
    assert len(supervised.children("serving")) == WORKERS
    assert len(supervised.children("working")) == 1
    body = b"\n".join(orjson.dumps({"event_type": "alert", "flow_id": n}) for n in range(10))
    async with aiohttp.ClientSession() as session:
        for number in range(40):  # new connections: the kernel spreads them over the workers
            async with session.post(f"{supervised.url}/log/events", data=body, headers={
                    "X-ID": f"02:00:00:00:02:{number:02x}", "Connection": "close",
                    "Content-Type": "application/x-ndjson"}) as response:
                assert response.status == 200
        text = await scrape(session, supervised.url)

        async def every_request_recorded():  # by each worker within REQUEST_RECORD_SECONDS
            text = await scrape(session, supervised.url)
            return metric(text, 'http_requests_total{method="POST",route="/log/events",'
                                'status="200"}') == 40

        await wait_for(every_request_recorded, timeout=5, interval=REQUEST_RECORD_SECONDS)
    assert metric(text, "http_worker_processes") == WORKERS
    assert metric(text, 'telemetry_records_total{kind="events",outcome="accepted"}') == 400

    async def one_generation_service():  # for the host, in the background process
        async with aiohttp.ClientSession() as session:
            return metric(await scrape(session, supervised.url), "rule_generation_workers") == 1

    await wait_for(one_generation_service, timeout=15)

    async def every_cache_listening():
        async with aiohttp.ClientSession() as session:
            return metric(await scrape(session, supervised.url),
                          "rule_etag_cache_listening") == 1

    await wait_for(every_cache_listening, timeout=15)
    assert stored_count(Sql(database)) == 400
    listening = [line for line in supervised.log_tail(100_000).splitlines()
                 if "router_backend.http: serving on" in line]
    assert len(listening) == WORKERS


async def test_a_killed_worker_is_replaced_while_the_others_serve(supervised):
    victim = supervised.children("serving")[0]
    supervised_pid = supervised.process.pid
    async with aiohttp.ClientSession() as session:
        subprocess.run(["kill", "-9", str(victim)], check=True)

        async def reaped():
            return f"(pid {victim}) exited" in supervised.log_tail(100_000)

        await wait_for(reaped, timeout=5)
        # The other worker answers meanwhile.
        for _ in range(20):
            async with session.get(f"{supervised.url}/health",
                                   headers={"X-ID": "02:00:00:00:02:01"}) as response:
                assert response.status == 200

        async def replaced():
            pids = supervised.children("serving")
            return len(pids) == WORKERS and victim not in pids

        await wait_for(replaced, timeout=15)

        async def both_live():
            return metric(await scrape(session, supervised.url),
                          "http_worker_processes") == WORKERS

        await wait_for(both_live, timeout=15)
    assert supervised.process.pid == supervised_pid and supervised.process.poll() is None
    assert "exited with signal SIGKILL" in supervised.log_tail(100_000)


async def test_connections_waiting_for_a_killed_worker_are_answered_by_another(supervised):
    """The workers accept from one listening socket: a connection waits in its queue, not in
    a worker's, so a worker that dies takes none of the waiting ones with it. The victim is
    stopped first (it accepts nothing), new connections arrive, then it is killed: with a
    socket per worker (SO_REUSEPORT) about half of them were queued on its socket and reset."""
    victim = supervised.children("serving")[0]
    os.kill(victim, signal.SIGSTOP)
    try:
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True)) as session:
            async def health(number: int) -> int:
                async with session.get(f"{supervised.url}/health", headers={
                        "X-ID": f"02:00:00:00:03:{number:02x}"}) as response:
                    return response.status

            polls = [asyncio.create_task(health(number)) for number in range(20)]
            await asyncio.sleep(0.5)
            os.kill(victim, signal.SIGKILL)
            assert await asyncio.gather(*polls) == [200] * 20
    finally:  # a stopped victim never lingers, whatever failed
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


async def test_new_connections_skip_a_worker_slot_in_a_crash_loop_delay(supervised):
    """A worker killed past RESTART_BURST times in the window is restarted after a delay
    (2 s here); its slot's sockets are closed meanwhile, so new connections are answered at
    once by the other worker instead of waiting in the slot's queue for the restart."""
    victim = supervised.children("serving")[0]
    for kill in range(RESTART_BURST + 2):  # the last two deaths: 1 s, then 2 s of delay
        others = set(supervised.children("serving")) - {victim}
        os.kill(victim, signal.SIGKILL)
        if kill == RESTART_BURST + 1:
            break

        async def replaced():
            return set(supervised.children("serving")) - others - {victim}

        victim = (await wait_for(replaced, timeout=10)).pop()

    async def delayed():
        return "restarting in 2s" in supervised.log_tail(5_000)

    await wait_for(delayed, timeout=5)
    timeout = aiohttp.ClientTimeout(total=1.0)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(
            force_close=True)) as session:
        for number in range(20):
            async with session.get(f"{supervised.url}/health", headers={
                    "X-ID": f"02:00:00:00:04:{number:02x}"}) as response:
                assert response.status == 200

    async def both_back():
        return len(supervised.children("serving")) == WORKERS and supervised.every_worker_serving()

    await wait_for(both_back, timeout=15)


async def test_sigterm_drains_every_worker_then_exits_0(supervised, database):
    lines, delay = 20, 0.05
    halfway, refused = asyncio.Semaphore(0), asyncio.Event()

    async def slow_body(number: int):
        for line in range(lines):
            if line == lines // 2:  # each upload under way when the signal comes, and after
                halfway.release()
                await refused.wait()
            yield b'{"event_type": "alert", "flow_id": %d}\n' % (number * 1000 + line)
            await asyncio.sleep(delay)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        async def upload(number: int) -> int:
            async with session.post(f"{supervised.url}/log/events", data=slow_body(number),
                                    headers={"X-ID": f"02:00:00:00:03:{number:02x}",
                                             "Content-Type": "application/x-ndjson"}) as answer:
                return (await answer.json())["accepted"]

        uploads = [asyncio.create_task(upload(n)) for n in range(8)]
        for _ in uploads:
            await asyncio.wait_for(halfway.acquire(), 30)
        supervised.process.send_signal(signal.SIGTERM)
        # refused while the uploads drain, not queued for nobody
        await wait_for(lambda: refusing(supervised.port), timeout=30)
        assert not any(task.done() for task in uploads)
        refused.set()
        accepted = await asyncio.gather(*uploads)
        status = await asyncio.to_thread(supervised.process.wait, 60)
    assert accepted == [lines] * 8 and status == 0
    assert stored_count(Sql(database)) == 8 * lines
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", supervised.port), timeout=1).close()
    assert supervised.children("serving") == []


def test_a_taken_port_stops_the_start_with_one_line(database, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "ops.cli", "serve", "--workers", "2"], cwd=REPOSITORY,
            env={**database_env(database), "PATH": "/usr/bin:/bin", "DATA_DIR": str(tmp_path),
                 "LISTEN_PORT": str(port), "RULE_PREPROCESS_AT_START": "false"},
            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr.splitlines()[-1]


def test_a_crash_loop_is_slowed_down_and_a_burst_is_not():
    assert [restart_delay(n) for n in range(1, RESTART_BURST + 1)] == [0.0] * RESTART_BURST
    assert [restart_delay(RESTART_BURST + n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert restart_delay(RESTART_BURST + 50) == MAX_DELAY_SECONDS


async def test_the_children_die_with_a_killed_supervisor(supervised):
    children = supervised.children("serving") + supervised.children("working")
    assert len(children) == WORKERS + 1
    supervised.kill()   # SIGKILL: no chance to stop them itself

    def running(pid: int) -> bool:  # a zombie (state Z) waits for a reaper but runs no more
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    async def all_gone():
        return not any(running(pid) for pid in children)

    await wait_for(all_gone, timeout=10)
