"""How the service logs: through `logging`, so an operator's configuration applies to every
line, access lines included; by default to stderr in batches.

Writing each line to stderr as it comes cost a fifth of the time of a 304 rules poll (the
hottest path; it writes one access line). `BatchingStreamHandler` is logging's StreamHandler
that, in a thread running an event loop, keeps the lines an iteration of the loop emits and
writes them with one write once the loop is done with its callbacks; elsewhere (another
thread, no loop running) it writes at once. A crash loses at most the lines of the iteration
in progress. LOG_CONFIG names a JSON file for `logging.config.dictConfig` instead of the
default (docs/operations.md, Logs).

Making a LogRecord and passing it through the logger and handler costs three times what the
line itself does, so a caller on the hot path may ask `direct_handler` whether its records
would reach only a default handler, unfiltered: it then hands that handler the lines the
records would have become (server/web/access_log.py does for the access lines).
"""

from __future__ import annotations

import asyncio
import json
import logging
import logging.config
import time
from pathlib import Path

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ServiceFormatter(logging.Formatter):
    """`LOG_FORMAT` as logging.Formatter writes it (tests/test_logs.py compares the two), with
    the time worked out once per second and a record without exception or stack written in
    one f-string."""

    _second = -1
    _stamp = ""

    def __init__(self) -> None:
        super().__init__(LOG_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        return f"{record.asctime} {record.levelname} {record.name}: {record.message}"

    def line(self, created: float, levelname: str, name: str, message: str) -> str:
        """What `format` writes for a plain record with these fields."""
        second = int(created)
        if second != self._second:
            self._seconds(created)
        return (f"{self._stamp},{int((created - second) * 1000):03d} {levelname} {name}: "
                f"{message}")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt:
            return super().formatTime(record, datefmt)
        return self.default_msec_format % (self._seconds(record.created), record.msecs)

    def _seconds(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._stamp = time.strftime(self.default_time_format, self.converter(second))
            self._second = second
        return self._stamp


class BatchingStreamHandler(logging.StreamHandler):
    """A StreamHandler whose writes from a thread running an event loop are batched per loop
    iteration (see the module's docstring). `flush()` writes what is waiting. Kept rather
    than the standard library's QueueHandler and QueueListener: a line through them costs
    the event loop's thread 12.2 µs against 6.1 µs here (50,000 lines to /dev/null), and
    their listener's thread then competes with the loop for the GIL."""

    def __init__(self, stream=None) -> None:
        super().__init__(stream)
        self._pending: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - logging's contract: report, never raise
            self.handleError(record)
            return
        self.write_line(line)

    def write_line(self, line: str) -> None:
        """Write a formatted line, or queue it for the end of the loop's iteration. The
        caller holds the handler's lock (Handler.handle does)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a thread of its own, or before or after the loop
            self._write(line + self.terminator)
            return
        if not self._pending:
            loop.call_soon(self.flush)
        self._pending.append(line + self.terminator)

    def write_lines(self, lines: list[str]) -> None:
        """Write formatted lines now, after what is waiting, in one write."""
        terminator = self.terminator
        with self.lock:
            self._write("".join([line + terminator for line in lines]))

    def flush(self) -> None:
        with self.lock:
            self._write("")

    def _write(self, text: str) -> None:
        """Write what is waiting, then `text`, in one write."""
        pending = self._pending
        if pending:
            text = "".join(pending) + text
            pending.clear()
        if text and self.stream is not None:
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):  # stderr closed: nowhere left to report it
                pass


def direct_handler(logger: logging.Logger, level: int) -> BatchingStreamHandler | None:
    """The handler a record of `logger` at `level` would reach, when it is the only one, a
    BatchingStreamHandler with a ServiceFormatter, and nothing filters the record on the
    way (the logger's own filters and the handler's: those of the loggers it propagates to
    are not applied, as in Logger.handle). None otherwise: make the record."""
    if logger.filters or logger.disabled:
        return None
    found, current = None, logger
    while current is not None:
        for handler in current.handlers:
            if level < handler.level:
                continue
            if (found is not None or type(handler) is not BatchingStreamHandler
                    or handler.filters or type(handler.formatter) is not ServiceFormatter):
                return None
            found = handler
        current = current.parent if current.propagate else None
    return found


def default_handler(stream=None) -> BatchingStreamHandler:
    """The service's lines, batched, to `stream` (stderr)."""
    handler = BatchingStreamHandler(stream)
    handler.setFormatter(ServiceFormatter())
    return handler


# The loggers whose records a client can make by the thousand (asyncio's accept() out of
# descriptors, aiohttp's errors of a connection): a red team's flood of connections wrote
# 15,955 tracebacks (61 MB) of them.
THROTTLED_LOGGERS = ("asyncio", "aiohttp.server", "aiohttp.web")
THROTTLED_KINDS = 256  # messages remembered; past them every record passes


class OncePerSecond(logging.Filter):
    """Passes a message (its format string, at its logger) at most once a second; the next
    one to pass says how many like it were left out meanwhile."""

    def __init__(self, clock=time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # The first line: asyncio's handler writes the transport of each connection below.
        kind, now = (record.name, str(record.msg).split("\n", 1)[0]), self._clock()
        passed, left_out = self._last.get(kind, (None, 0))
        if passed is not None and now - passed < 1.0:
            self._last[kind] = (passed, left_out + 1)
            return False
        if len(self._last) < THROTTLED_KINDS or kind in self._last:
            self._last[kind] = (now, 0)
        if left_out:
            record.msg = f"{record.msg} ({left_out} more like it in the last "\
                         f"{now - passed:.0f} s left out)"
        return True


def throttle(loggers: tuple[str, ...] = THROTTLED_LOGGERS) -> None:
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(each, OncePerSecond) for each in logger.filters):
            logger.addFilter(OncePerSecond())


def configure_logging(config_file: Path | None = None, level: int = logging.INFO) -> None:
    """The default (records at `level` and up, batched to stderr) or the operator's
    dictConfig from `config_file` (JSON); either way the loggers a client can flood are
    throttled (OncePerSecond)."""
    if config_file is not None:
        logging.config.dictConfig(json.loads(config_file.read_text()))
    else:
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.addHandler(default_handler())
        root.setLevel(level)
    throttle()


def flush_logs() -> None:
    """Write what the root logger's handlers hold (the loop may not run again)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
