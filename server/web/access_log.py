"""The access log: one INFO record per request on the `aiohttp.access` logger, so whatever
logging configuration applies to the service's other lines applies to it (its level turns it
off).

A request only queues references to what its line will say; every FLUSH_SECONDS (or
FLUSH_LINES lines, and at shutdown) they become lines, all at once: with the default
configuration handed straight to the batching handler (server/logs.py direct_handler: the
same bytes as the records would give), otherwise as records through the logger. A 304
rules poll, the hottest path of the service, spent a fifth of its time on its access line
when each line was a record written on its own, and 15 % when each request formatted its
own line (the 304 path 11 % faster with the lines formatted together at the flush,
measured under wrk against the same code formatting per request). A crash loses at most
FLUSH_SECONDS of access lines.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Sequence

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError

from server.logs import direct_handler
from server.web.peers import BadForwardedAddress, Network, address_from, header_values


MAX_QUOTED = 256  # characters of a client-chosen value (path, X-ID) kept in a log line
FLUSH_SECONDS = 0.05
FLUSH_LINES = 512


def quoted(value: str) -> str:
    r"""A client-chosen value inside double quotes, so that it cannot end the quotes or the
    line: backslash, quote and every non-printable character are escaped (\\, \", \xHH,
    \uHHHH), and it is cut at MAX_QUOTED characters."""
    text = value[:MAX_QUOTED]
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'  # what every well-behaved router sends: no work
    escaped = "".join(_escape(character) for character in text)
    return f'"{escaped}"'


def _escape(character: str) -> str:
    if character in '"\\':
        return "\\" + character
    if character.isprintable():
        return character
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


ACCESS_LOGGER = logging.getLogger("aiohttp.access")
SERVER_LOGGER = logging.getLogger("aiohttp.server")


class RefusedHeadFilter(logging.Filter):
    """aiohttp logs every request head its parser refuses (a control character in a header,
    a bad request line ...) at ERROR with a traceback, so any client could fill the log with
    tracebacks. The access log has a line (400) for each; this keeps the parser's reason as
    one DEBUG line, written only when DEBUG is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.msg = f"{record.getMessage()}: {str(error).splitlines()[0]}"
        record.args, record.exc_info, record.exc_text = (), None, None
        return SERVER_LOGGER.isEnabledFor(logging.DEBUG)


def quiet_refused_heads() -> None:
    """Install RefusedHeadFilter once (each app calls it)."""
    if not any(isinstance(f, RefusedHeadFilter) for f in SERVER_LOGGER.filters):
        SERVER_LOGGER.addFilter(RefusedHeadFilter())


class AccessLogger(AbstractAccessLogger):
    """aiohttp's hook for an access line per request (`ADDRESS "REQUEST LINE" STATUS BYTES
    SECONDSs "X-ID"`, made at the flush by _request_message); honours the level set
    for the `aiohttp.access` logger. The path and X-ID come from the client and are escaped
    (`quoted`). ADDRESS is the client's, read through `trusted_proxies` (see
    access_logger_for)."""

    trusted_proxies: frozenset[Network] = frozenset()

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)

    def log(self, request: web.BaseRequest, response: web.StreamResponse,
            elapsed: float) -> None:
        # Only references now; the line is made with the others at the flush (see the
        # module's docstring).
        _queue((request.remote, request.headers, self.trusted_proxies, request.method,
                request.raw_path, request.version, response.status, response.body_length,
                elapsed))


def access_logger_for(proxies: Sequence[Network]) -> type[AccessLogger]:
    """The access logger class for a runner (aiohttp makes the instances): behind Caddy the
    connection's address is the proxy's, so the client's is read as the API reads it."""
    return type("AccessLogger", (AccessLogger,),
                {"trusted_proxies": frozenset(proxies)})


def _queue(request_fields: tuple) -> None:
    if not _queued:
        asyncio.get_running_loop().call_later(FLUSH_SECONDS, flush)
    _queued.append((time.time(), request_fields))
    if len(_queued) >= FLUSH_LINES:
        flush()  # (the timer then finds nothing to write)


# (when, what AccessLogger.log took of its request) of the lines not yet written
_queued: list[tuple[float, tuple]] = []


def flush() -> None:
    """Write the queued lines (see the module's docstring)."""
    if not _queued:
        return
    queued = _queued[:]
    _queued.clear()
    queued = [(created, _request_message(*fields)) for created, fields in queued]
    handler = direct_handler(ACCESS_LOGGER, logging.INFO)
    if handler is None:
        for created, message in queued:
            ACCESS_LOGGER.handle(_record(created, message))
        return
    line = handler.formatter.line
    handler.write_lines([line(created, "INFO", ACCESS_LOGGER.name, message)
                         for created, message in queued])


def _request_message(remote: str | None, headers, proxies: frozenset[Network], method: str,
                     path: str, version, status: int, size: int, elapsed: float) -> str:
    request_line = f"{method} {path} HTTP/{version.major}.{version.minor}"
    router = ",".join(header_values(headers, "X-ID")) or "-"
    try:
        client = address_from(remote, headers, proxies)
    except BadForwardedAddress:
        client = remote or "-"  # the request was answered 400; its line names the proxy
    return (f"{client} {quoted(request_line)} {status} {size} "
            f"{elapsed:.6f}s {quoted(router)}")


def _record(created: float, message: str) -> logging.LogRecord:
    """The INFO record of an access line, dated when its request was answered."""
    record = ACCESS_LOGGER.makeRecord(ACCESS_LOGGER.name, logging.INFO, __file__, 0, message,
                                      (), None, "log")
    record.relativeCreated -= (record.created - created) * 1000
    record.created, record.msecs = created, float(int(created % 1 * 1000))
    return record
