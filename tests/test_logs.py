"""Logging (server/logs.py): every line, access lines included, goes through `logging`,
so an operator's configuration (LOG_CONFIG) applies to all of them; by default the lines an
iteration of the event loop emits are written to stderr with one write."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys
import time
import urllib.request
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import make_mocked_request

from server.logs import (LOG_FORMAT, THROTTLED_LOGGERS, BatchingStreamHandler, OncePerSecond,
                         ServiceFormatter, default_handler, direct_handler, throttle)
from server.web import access_log
from server.settings import SettingsError, load_settings
from testkit.server import ServerRunner

LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO test\.logs: (.*)")


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def logged(monkeypatch):
    """A logger of its own whose lines go to a CountingStream through the default handler."""
    stream = CountingStream()
    handler = default_handler(stream)
    logger = logging.getLogger("test.logs")
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logger, "level", logging.INFO)
    return logger, stream, handler


def messages(stream: io.StringIO) -> list[str]:
    return [LINE.fullmatch(line).group(1) for line in stream.getvalue().splitlines()]


async def test_the_lines_of_one_loop_iteration_are_written_at_once(logged):
    logger, stream, _ = logged
    for n in range(3):
        logger.info("line %d", n)
    assert stream.writes == 0  # not yet: the loop is still running this callback
    await asyncio.sleep(0)
    assert (stream.writes, messages(stream)) == (1, ["line 0", "line 1", "line 2"])
    logger.info("line 3")
    await asyncio.sleep(0)
    assert (stream.writes, messages(stream)[-1]) == (2, "line 3")


async def test_a_line_from_another_thread_is_written_at_once_after_those_waiting(logged):
    logger, stream, _ = logged
    logger.info("from the loop")
    await asyncio.to_thread(logger.info, "from a thread")
    assert messages(stream) == ["from the loop", "from a thread"]


async def test_flush_writes_what_waits(logged):
    logger, stream, handler = logged
    logger.info("waiting")
    handler.flush()  # as at shutdown, when the loop may not run again
    assert messages(stream) == ["waiting"]
    await asyncio.sleep(0)
    assert messages(stream) == ["waiting"]  # and only once


def test_a_line_outside_any_loop_is_written_at_once(logged):
    logger, stream, _ = logged
    logger.info("no loop")
    assert messages(stream) == ["no loop"]


def test_the_service_formatter_writes_what_logging_formatter_writes():
    plain, fast = logging.Formatter(LOG_FORMAT), ServiceFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("x", logging.ERROR, "f.py", 1, "failed %s", ("it",),
                                   sys.exc_info())
    records = [logging.LogRecord("test.logs", logging.INFO, "f.py", 1, "a %d%% line", (5,),
                                 None),
               logging.LogRecord("aiohttp.access", logging.WARNING, "", 0, '"%s" 100%', (),
                                 None), failed]
    assert [fast.format(record) for record in records] == [
        plain.format(record) for record in records]


class Peer:
    """A connection's transport as aiohttp asks it for the client's address."""

    def get_extra_info(self, name: str, default=None):
        return ("192.0.2.7", 40000) if name == "peername" else default


def log_request(path: str, status: int, size: int, elapsed: float) -> None:
    """What aiohttp does once router aa:bb's GET of `path` is answered: the access logger's
    log() (the server's class, no trusted proxies)."""
    request = make_mocked_request("GET", path, headers={"X-ID": "aa:bb"}, transport=Peer())
    logger = access_log.access_logger_for(frozenset())(access_log.ACCESS_LOGGER, "")
    logger.log(request, SimpleNamespace(status=status, body_length=size), elapsed)


async def test_an_access_line_handed_straight_to_the_handler_is_the_records_line(
        access_lines, monkeypatch):
    """With the default handler an access line skips the LogRecord (direct_handler); a
    filter on its way makes the record instead, and the bytes are the same."""
    logger = logging.getLogger("aiohttp.access")
    handler = next(h for h in logger.handlers if isinstance(h, BatchingStreamHandler))
    only(logger, handler, monkeypatch)
    records = []
    log_request('/x"y', 304, 0, 0.000123)
    access_log.flush()  # as the loop does at the end of the iteration
    handler.addFilter(lambda record: records.append(record) or True)
    log_request('/x"y', 304, 0, 0.000123)
    access_log.flush()
    handler.filters.clear()
    await asyncio.sleep(0)
    assert len(records) == 1  # the second line went through a record, the first did not
    direct, recorded = [line.split(" ", 2)[2] for line in access_lines()]  # past the time
    assert direct == recorded == \
        'INFO aiohttp.access: 192.0.2.7 "GET /x\\"y HTTP/1.1" 304 0 0.000123s "aa:bb"'


async def test_an_access_record_is_dated_when_its_request_was_answered(access_lines, monkeypatch):
    """A record made at the end of the iteration keeps the time its request was answered
    (the line's time, %(created)f, %(relativeCreated)d), not the flush's."""
    logger = logging.getLogger("aiohttp.access")
    handler = next(h for h in logger.handlers if isinstance(h, BatchingStreamHandler))
    only(logger, handler, monkeypatch)
    records = []
    handler.addFilter(lambda record: records.append(record) or True)
    answered = time.time() - 5.25  # the request, answered long before the flush
    with monkeypatch.context() as clock:
        clock.setattr(access_log, "time", SimpleNamespace(time=lambda: answered))
        log_request("/health", 200, 2, 0.001)
    access_log.flush()
    handler.filters.clear()
    [record] = records
    assert record.created == answered
    assert record.msecs == int(answered % 1 * 1000)
    now = logging.makeLogRecord({})
    assert 5.2 < (now.relativeCreated - record.relativeCreated) / 1000 < 7  # not the flush's, 0


async def test_access_lines_are_queued_then_written_together(access_lines):
    """Queued, then written every FLUSH_SECONDS, or at once when FLUSH_LINES are waiting."""
    log_request("/health", 200, 2, 0.001)
    await asyncio.sleep(0)
    assert access_lines() == []
    await asyncio.sleep(access_log.FLUSH_SECONDS * 2)  # the flush; here (pytest's handlers
    await asyncio.sleep(0)  # are on the way) through records, written an iteration later
    assert len(access_lines()) == 1
    for number in range(access_log.FLUSH_LINES):
        log_request(f"/{number}", 200, 2, 0.001)
    await asyncio.sleep(0)
    assert len(access_lines()) == 1 + access_log.FLUSH_LINES


def only(logger: logging.Logger, handler: logging.Handler, monkeypatch) -> None:
    """`handler` alone on `logger`, as in a served process: pytest adds capture handlers to
    loggers when a test starts."""
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(logger, "propagate", False)


def test_a_second_handler_or_a_filter_on_the_logger_gets_the_record(logged, monkeypatch):
    logger, _, handler = logged
    only(logger, handler, monkeypatch)
    assert direct_handler(logger, logging.INFO) is handler
    assert direct_handler(logger, logging.DEBUG) is handler
    other = logging.NullHandler()
    logger.addHandler(other)
    assert direct_handler(logger, logging.INFO) is None
    other.setLevel(logging.ERROR)  # a handler the level does not reach does not count
    assert direct_handler(logger, logging.INFO) is handler
    logger.removeHandler(other)
    logger.addFilter(lambda record: True)
    assert direct_handler(logger, logging.INFO) is None
    handler.setFormatter(logging.Formatter(LOG_FORMAT))  # (the filter is cleared below)
    logger.filters.clear()
    assert direct_handler(logger, logging.INFO) is None  # another formatter


def test_an_operators_log_config_applies_to_access_lines(database, tmp_path):
    """LOG_CONFIG: access lines to a file of their own in the operator's format, the rest
    at WARNING and up only."""
    access_file = tmp_path / "access.log"
    config = {
        "version": 1,
        "formatters": {"plain": {"format": "%(levelname)s|%(name)s|%(message)s"}},
        "handlers": {
            "access": {"class": "logging.FileHandler", "filename": str(access_file),
                       "formatter": "plain"},
            "stderr": {"class": "server.logs.BatchingStreamHandler",
                       "formatter": "plain"}},
        "loggers": {"aiohttp.access": {"handlers": ["access"], "level": "INFO",
                                       "propagate": False}},
        "root": {"handlers": ["stderr"], "level": "WARNING"}}
    config_file = tmp_path / "logging.json"
    config_file.write_text(json.dumps(config))
    server = ServerRunner(database, tmp_path, LOG_CONFIG=str(config_file)).start()
    try:
        request = urllib.request.Request(f"{server.url}/health",
                                         headers={"X-ID": "aa:bb:cc:00:26:01"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
    finally:
        assert server.stop() == 0
    lines = access_file.read_text().splitlines()
    assert len(lines) == 1, lines
    assert re.fullmatch(r'INFO\|aiohttp\.access\|127\.0\.0\.1 "GET /health HTTP/1\.1" 200 \d+ '
                        r'[\d.]+s "aa:bb:cc:00:26:01"', lines[0]), lines[0]
    server_log = server.log_path.read_text()
    assert "serving on" not in server_log and "INFO" not in server_log, server_log


@pytest.mark.parametrize("content, reason", [
    (None, "No such file"), ("{not json", "Expecting"), ('{"handlers": {}}', '"version": 1'),
    ("[1]", '"version": 1')])
def test_a_broken_log_config_stops_the_start_with_its_reason(tmp_path, content, reason):
    path = tmp_path / "logging.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SettingsError, match=f"invalid LOG_CONFIG: {path}: .*{re.escape(reason)}"):
        load_settings({"LOG_CONFIG": str(path)}, env_file=None)


def test_a_message_a_client_can_repeat_is_written_once_a_second_with_a_count():
    """A red team's flood of connections wrote 15,955 tracebacks (61 MB) of asyncio's and
    aiohttp's errors. The same message (its first line) passes once a second; the next that
    passes says how many were left out."""
    now = [100.0]
    throttled = OncePerSecond(clock=lambda: now[0])

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, None, None)

    accept = "socket.accept() out of system resource\nsocket: <listening>"
    assert throttled.filter(record(accept))
    assert [throttled.filter(record(accept)) for _ in range(999)] == [False] * 999
    assert throttled.filter(record("another message"))
    now[0] += 1.5
    again = record(accept)
    assert throttled.filter(again)
    assert "(999 more like it in the last 2 s left out)" in again.getMessage()
    assert throttled.filter(record("another message"))


def test_the_loggers_a_client_can_flood_are_throttled_once():
    throttle()  # as each configuration of the logs does (a command, then the service)
    throttle()
    for name in THROTTLED_LOGGERS:
        assert sum(isinstance(each, OncePerSecond)
                   for each in logging.getLogger(name).filters) == 1
