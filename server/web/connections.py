"""The client connections an HTTP worker holds, bounded: past HTTP_MAX_CONNECTIONS, each new
connection closes the oldest one held, so a worker never runs out of descriptors for its
database connections, its files and the clients that come next.

A red team holding 42,000 idle connections from three clients exhausted both workers'
descriptors (accept(): too many open files): honest routers could no longer connect until
the idle timer closed the flood's connections, which the flood opened again. Refusing new
connections at a bound would keep the flood's and refuse the honest; closing the oldest
cycles the flood's out instead. A connection answering a request is closed last, and only
once its answer is sent; an idle one ends at once.

aiohttp's sites give no hook at accept, so the listening sockets are served by asyncio's
`create_server` with this bound as the protocol factory, around aiohttp's own (web.Server,
which is a protocol factory for create_server).
"""

from __future__ import annotations

import asyncio
import resource
import socket
import time

from aiohttp import web

# Descriptors kept for what is not a client: the database pool, the change feed, files,
# logs, DNS, a job's downloads.
DESCRIPTORS_RESERVED = 256
# How often the connections ended by their clients are forgotten (the count is of those
# held since; an over-count only closes an old connection a little early).
FORGET_EVERY_SECONDS = 1.0
LISTEN_BACKLOG = 128  # aiohttp's own


def descriptor_limit() -> int:
    """The process's descriptor limit, its soft limit raised to the hard one first (the
    soft is often 1,024 where the hard allows far more)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


def most_connections(configured: int, pool_connections: int) -> int:
    """HTTP_MAX_CONNECTIONS, or (0) the descriptor limit less what the process keeps for
    itself; never more than that."""
    room = max(descriptor_limit() - DESCRIPTORS_RESERVED - pool_connections, 16)
    return min(configured, room) if configured else room


class ConnectionBound:
    """A protocol factory for asyncio's create_server: aiohttp's handler for each new
    connection, the oldest held closed first once `most` are held."""

    def __init__(self, server: web.Server, most: int, answering: set[object]) -> None:
        self._server = server
        self.most = most
        self._answering = answering  # the connections answering a request (InFlight)
        self._held: dict[web.RequestHandler, float] = {}  # oldest first, with its start
        self._forgotten_at = time.monotonic()

    def __call__(self) -> web.RequestHandler:
        now = time.monotonic()
        if now - self._forgotten_at >= FORGET_EVERY_SECONDS:
            self._forget_ended(now)
        while len(self._held) >= self.most:
            self._close_oldest()
        handler = self._server()
        self._held[handler] = now
        return handler

    def _close_oldest(self) -> None:
        """Closes the oldest connection that answers no request, else the oldest once its
        answer is sent. (aiohttp's graceful close of an idle connection ends its task but
        leaves its socket open: an idle one is closed outright.)"""
        oldest = next((handler for handler in self._held if handler not in self._answering),
                      next(iter(self._held)))
        del self._held[oldest]
        if oldest.transport is None:
            # Ended by its client, or accepted in this burst and not yet made (asyncio makes
            # it in the loop's next turn, before this callback).
            asyncio.get_running_loop().call_soon(self._close, oldest)
        else:
            self._close(oldest)

    def _close(self, handler: web.RequestHandler) -> None:
        if handler.transport is None:  # ended by its client
            return
        if handler in self._answering:
            handler.close()
        else:
            handler.force_close()

    def _forget_ended(self, now: float) -> None:
        """Forgets the connections whose clients ended them. One made in this loop's turn
        has no transport yet either (asyncio makes it next turn): those of the last second
        are kept."""
        self._held = {handler: began for handler, began in self._held.items()
                      if handler.transport is not None or now - began < FORGET_EVERY_SECONDS}
        self._forgotten_at = now


async def serve(bound: ConnectionBound, sockets: list[socket.socket]
                ) -> list[asyncio.base_events.Server]:
    """Serves `sockets` (listening, or bound to listen) through `bound`."""
    loop = asyncio.get_running_loop()
    return [await loop.create_server(bound, sock=sock, backlog=LISTEN_BACKLOG)
            for sock in sockets]


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """A SO_REUSEPORT listening socket on every address of `host` (a supervisor's slot's,
    or a lone process's own); a port already taken stops the start with one clear error."""
    return bound_sockets(host, port, backlog=LISTEN_BACKLOG)


def bound_sockets(host: str, port: int, backlog: int | None) -> list[socket.socket]:
    """A socket bound on every address of `host`: with a `backlog`, SO_REUSEPORT and
    listening; without, a plain bind (a probe). OSError naming the address when one cannot
    be (every socket made so far closed)."""
    sockets = []
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if backlog is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            if backlog is not None:
                sock.listen(backlog)
    except OSError as error:
        for sock in sockets:
            sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    return sockets
