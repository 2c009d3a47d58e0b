"""HTTP connections that answer rules polls 304 as soon as their head is parsed.

aiohttp hands each parsed request to a per-connection loop that builds a request object, runs
it in a task of its own and goes back through the event loop two more times before the next
request; for the 304 of a rules poll (server/polling/not_modified.py) that machinery is most
of the cost. `PollingRequestHandler` is aiohttp's connection protocol with one change: when
the connection is idle (no request queued or in progress) and a parsed head is a poll the
application's `NotModified` answers, the answer is written at once and the head never
reaches the request loop. Anything else is queued exactly as aiohttp queues it, and the
request loop answers it and everything pipelined after it, in order.

This leans on aiohttp's connection internals (its request queue, waiter and keep-alive
timer), so setup.py pins aiohttp's minor version and tests/test_connection.py pins the
behaviours it relies on: 150 pipelined requests in order, keep-alive, a poll behind a request
in progress, a client that stops reading, and the same headers as the application's 304.
An app with on_response_prepare handlers gets no fast path: its 304s would lack what those
handlers add (HTTP_FAST_NOT_MODIFIED=false turns it off too).
"""

from __future__ import annotations

import time

from aiohttp import EMPTY_PAYLOAD, web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.web_protocol import RequestHandler

from server.polling.etag_cache import etag_header
from server.polling.not_modified import NotModified
from server.typedefs import ETAG_CACHE, SETTINGS


class PollingRequestHandler(RequestHandler):
    def __init__(self, manager: web.Server, not_modified: NotModified, **kwargs) -> None:
        super().__init__(manager, **kwargs)
        self._not_modified = not_modified
        self._remote: str | None = None

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done() or self._messages:
            super().data_received(data)  # busy: the request loop keeps the order
            return
        self._waiter = None  # queue what is parsed without waking the request loop
        try:
            super().data_received(data)
        finally:
            self._waiter = waiter
        answered = self._answer_polls()
        if answered:
            self._restart_keepalive_timer()
        if (self._messages or self._buffer_paused) and not waiter.done():
            waiter.set_result(None)

    def _answer_polls(self) -> int:
        """Answer the queued heads from the first while they are polls answered 304, and while
        the client reads its answers: once the socket's send buffer is full (writing paused),
        the request loop answers, waiting for the client as it does for any response."""
        answered, messages, transport = 0, self._messages, self.transport
        while (messages and transport is not None and not self._buffer_paused
               and not self.writing_paused):
            response = self._answer_poll(*messages[0])
            if response is None:
                break
            messages.popleft()
            self._parser.message_consumed()
            transport.write(response)
            answered += 1
        return answered

    def _answer_poll(self, message, payload) -> bytes | None:
        """The whole 304 response to a parsed request head, or None when the application
        must answer it."""
        started = time.perf_counter()
        path = getattr(message, "path", None)  # a head aiohttp could not parse has none
        if (path is None or message.method != "GET" or payload is not EMPTY_PAYLOAD
                or message.should_close or message.upgrade or message.version != (1, 1)):
            return None
        found = self._not_modified.current_etag(path, message.headers)
        if found is None:
            return None
        head = (f"HTTP/1.1 304 Not Modified\r\nETag: {etag_header(found[1])}\r\n"
                f"Date: {rfc822_formatted_time()}\r\nServer: {SERVER_SOFTWARE}\r\n\r\n")
        self._not_modified.record(path, found[0], self._remote_address(),
                                  time.perf_counter() - started)
        return head.encode()

    def _restart_keepalive_timer(self) -> None:
        """As aiohttp's request loop does after each response: the idle connection is closed
        `keepalive_timeout` after this answer unless another head arrives."""
        if not self._keepalive_timeout or self._force_close or self._close:
            return
        loop = self._loop
        close_time = loop.time() + self._keepalive_timeout
        self._next_keepalive_close_time = close_time
        if self._keepalive_handle is None:
            self._keepalive_handle = loop.call_at(close_time, self._process_keepalive)

    def _remote_address(self) -> str:
        if self._remote is None:
            peer = self.transport.get_extra_info("peername") if self.transport else None
            self._remote = str(peer[0]) if isinstance(peer, (list, tuple)) else str(peer)
        return self._remote


class PollingServer(web.Server):
    """aiohttp's protocol factory, making `PollingRequestHandler`s."""

    def __init__(self, server: web.Server, not_modified: NotModified) -> None:
        super().__init__(server.request_handler, request_factory=server.request_factory,
                         handler_cancellation=server.handler_cancellation, loop=server._loop,
                         **server._kwargs)
        self.not_modified = not_modified

    def __call__(self) -> PollingRequestHandler:
        return PollingRequestHandler(self, self.not_modified, loop=self._loop, **self._kwargs)


class PollingAppRunner(web.AppRunner):
    """An AppRunner whose connections answer polls first, when the app serves routers."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()  # the app started: its caches exist
        if ETAG_CACHE not in self.app or not self.app[SETTINGS].http_fast_not_modified:
            return server  # routers are not served here, or the operator wants no fast path
        if len(self.app.on_response_prepare):
            return server  # a 304 written here would lack what those handlers add
        return PollingServer(server, NotModified(self.app))
