"""The client connections an HTTP worker holds (server/web/connections.py): bounded, the oldest
closed first, so a flood of idle connections never takes the descriptors honest routers and
the database need."""

from __future__ import annotations

import resource
import select
import socket
import time
import urllib.request
from pathlib import Path

from server.web import connections
from testkit.server import running_server

MOST = 40


def _idle_connections(port: int, count: int) -> list[socket.socket]:
    """Connections that send nothing, as a flood of idle clients holds them."""
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        held.append(sock)
    return held


def _ended(sockets: list[socket.socket]) -> list[bool]:
    """Which of `sockets` the server has closed (readable, and nothing to read)."""
    readable, _, _ = select.select(sockets, [], [], 0)
    return [sock in readable and sock.recv(1, socket.MSG_PEEK) == b"" for sock in sockets]


def _wait_ended(sockets: list[socket.socket], at_least: int, timeout: float) -> list[bool]:
    deadline = time.monotonic() + timeout
    while True:
        ended = _ended(sockets)
        if sum(ended) >= at_least or time.monotonic() > deadline:
            return ended
        time.sleep(0.05)


def _poll(url: str) -> int:
    request = urllib.request.Request(f"{url}/rules/last_updated",
                                     headers={"X-ID": "02:00:00:00:00:01"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status


def _descriptors(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def test_past_the_bound_the_oldest_connections_are_closed_and_an_honest_poll_is_served(
        database, tmp_path):
    """A red team's 42,000 idle connections from three clients exhausted both workers'
    descriptors: honest routers could not connect. HTTP_MAX_CONNECTIONS 40 here: 120 idle
    connections, then an honest poll; the oldest 80 are closed, the newest kept, the poll
    answered, and the worker holds no more than its bound and its own."""
    with running_server(database, tmp_path, HTTP_MAX_CONNECTIONS=str(MOST),
                        HTTP_IDLE_TIMEOUT_SECONDS="300") as server:
        assert _poll(server.url) == 200  # the database's connections opened
        before = _descriptors(server.process.pid)
        held = _idle_connections(server.port, 3 * MOST)
        try:
            ended = _wait_ended(held, 2 * MOST, timeout=30)
            assert sum(ended) == 2 * MOST, sum(ended)
            assert ended[:2 * MOST] == [True] * (2 * MOST)  # the oldest first
            assert _poll(server.url) == 200
            # The poll's connection took the place of the oldest one still held.
            assert sum(_wait_ended(held, 2 * MOST + 1, timeout=30)) == 2 * MOST + 1
            assert _descriptors(server.process.pid) <= before + MOST
        finally:
            for sock in held:
                sock.close()


def test_the_bound_leaves_room_for_the_database_and_the_process_own(monkeypatch):
    """0 (the default): the descriptor limit, its soft limit raised to the hard one, less a
    reserve and the database connections; a bound set higher than that is lowered to it."""
    monkeypatch.setattr(connections, "descriptor_limit", lambda: 20_000)
    room = 20_000 - connections.DESCRIPTORS_RESERVED - 30
    assert connections.most_connections(0, 30) == room
    assert connections.most_connections(500, 30) == 500
    assert connections.most_connections(1_000_000, 30) == room


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and hard > 64:
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
            assert connections.descriptor_limit() == hard
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
