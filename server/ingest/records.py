"""Split a streamed telemetry body into raw records without holding the body in memory.

Two framings, both fed decoded chunks as they arrive:

* `NdjsonSplitter`: one record per line; blank lines are skipped: runs of empty lines at C
  speed (a regular expression finds them; a gzip body of nothing but newlines costs what its
  decoding does), other lines of only whitespace one by one, at most
  MAX_WHITESPACE_LINES of them in a body (refused beyond: no agent writes them).
* `JsonArraySplitter`: a top-level JSON array; each element's bytes are cut out by tracking
  bracket depth outside strings, so elements are parsed one at a time. Ours rather than
  ijson's: ijson yields parsed objects and events, never an element's bytes, and records
  are stored as they were received (the chunks' density, the export's fidelity); nor can
  it drop an oversized element's bytes as they stream in.

Each `feed` returns `(number, raw)` pairs: `number` is the 1-based line (NDJSON) or element
position (array); `raw` is the record's bytes, or None when the record exceeded the size limit
(its bytes were dropped as they came). Broken framing raises `BodyError` (answered 400).
"""

from __future__ import annotations

import re

RawRecord = tuple[int, bytes | None]

MAX_WHITESPACE_LINES = 10_000
_EMPTY_LINES = re.compile(rb"\n\n+")  # a single-byte repeat: sre scans it in C


class BodyError(ValueError):
    """The body cannot be read as the announced framing; the whole request is refused."""


class NdjsonSplitter:
    def __init__(self, max_record_bytes: int):
        self._max = max_record_bytes
        self._pending = bytearray()
        self._oversized = False
        self._line = 0
        self._whitespace_lines = 0

    def feed(self, data: bytes) -> list[RawRecord]:
        out: list[RawRecord] = []
        first = data.find(b"\n")
        if first < 0:
            self._append(data)
            return out
        self._complete(data[:first], out)
        last = data.rfind(b"\n")
        # The complete lines between: split around each run of empty lines, which is counted.
        start = first + 1
        for run in _EMPTY_LINES.finditer(data, first, last + 1):
            self._lines(data[start:run.start()], out)
            self._line += run.end() - max(start, run.start() + 1)
            start = run.end()
        self._lines(data[start:last], out)
        self._append(data[last + 1:])
        return out

    def _lines(self, text: bytes, out: list[RawRecord]) -> None:
        """Lines separated by single newlines (the last without its own)."""
        if not text:
            return
        limit = self._max
        for line in text.split(b"\n"):  # the common case, kept tight
            self._line += 1
            if len(line) > limit:
                out.append((self._line, None))
            elif not line or line.isspace():
                self._whitespace_line()
            else:
                out.append((self._line, line))

    def _whitespace_line(self) -> None:
        self._whitespace_lines += 1
        if self._whitespace_lines > MAX_WHITESPACE_LINES:
            raise BodyError(f"more than {MAX_WHITESPACE_LINES} lines of nothing but "
                            "whitespace")

    def close(self) -> list[RawRecord]:
        out: list[RawRecord] = []
        if self._pending or self._oversized:
            self._complete(b"", out)
        return out

    def _append(self, piece: bytes) -> None:
        if self._oversized:
            return
        self._pending += piece
        if len(self._pending) > self._max:
            self._oversized = True
            self._pending = bytearray()

    def _complete(self, tail: bytes, out: list[RawRecord]) -> None:
        self._line += 1
        if self._pending:
            self._append(tail)
            line = bytes(self._pending)
            self._pending = bytearray()
        else:
            line = tail
            if len(line) > self._max:
                self._oversized = True
        if self._oversized:
            self._oversized = False
            out.append((self._line, None))
        elif line.strip():
            out.append((self._line, line))


# Between elements (depth 1): a complete string, a bracket or comma, or a lone quote (a string
# cut by the chunk boundary).
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]|"')
# Inside an element only brackets matter: skip everything else, strings whole, in one possessive
# (never backtracking) match, and stop at the next bracket or at a string cut by the boundary.
_INSIDE = re.compile(rb'(?:[^"\[\]{}]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")*+([\[\]{}]|")')
# The rest of a string whose start was dropped: stops before its closing quote, or at the end
# (before a backslash whose escaped byte is in the next chunk).
_STRING_REST = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+')
_WHITESPACE = b" \t\r\n"


class JsonArraySplitter:
    def __init__(self, max_record_bytes: int):
        self._max = max_record_bytes
        self._buffer = b""        # unconsumed bytes, starting at the current element
        self._scanned = 0         # offset in _buffer up to which tokens were processed
        self._depth = 0           # 1 between elements, >1 inside one
        self._started = False
        self._finished = False
        self._dropped = False     # the current element exceeded the limit; its bytes are gone
        self._in_string = False   # ... and the chunk ended inside one of its strings
        self._index = 0
        self._separators = 0

    def feed(self, data: bytes) -> list[RawRecord]:
        out: list[RawRecord] = []
        if self._finished:
            self._check_trailing(data)
            return out
        buffer = self._buffer + data
        if not self._started:
            stripped = buffer.lstrip(_WHITESPACE)
            if not stripped:
                self._buffer = b""
                return out
            if stripped[:1] != b"[":
                raise BodyError("body is not a JSON array (expected '[')")
            buffer = stripped[1:]
            self._started = True
            self._depth = 1
        if self._in_string:
            buffer = self._skip_string(buffer)
            if self._in_string:
                self._buffer = buffer
                return out
        element_start, position = 0, self._scanned
        while token := self._next_token(buffer, position):
            start, position = token
            mark = buffer[start]
            if mark == 0x22:  # a lone quote: wait for the rest of this string
                position = start
                break
            if mark == 0x5B or mark == 0x7B:  # [ {
                self._depth += 1
                continue
            if self._depth > 1:
                self._depth -= 1
                continue
            if mark == 0x7D:  # }
                raise BodyError("body is not a JSON array (unbalanced '}')")
            # depth 1: ',' between elements or the array's closing ']'
            closing = mark == 0x5D
            self._cut(buffer[element_start:start], out, closing=closing)
            if closing:
                self._finished = True
                self._check_trailing(buffer[position:])
                self._buffer = b""
                return out
            element_start = position
        else:
            position = len(buffer)
        self._keep(buffer, element_start, position)
        return out

    def _next_token(self, buffer: bytes, position: int) -> tuple[int, int] | None:
        """(start, end) of the next token that matters at the current depth: a bracket, a
        comma between elements, or a lone quote; None when the buffer holds no more."""
        if self._depth > 1:
            match = _INSIDE.match(buffer, position)
            return None if match is None else match.span(1)
        while match := _TOKENS.search(buffer, position):
            if match.end() - match.start() == 1:
                return match.span()
            position = match.end()  # a whole string between elements: not an object
        return None

    def close(self) -> list[RawRecord]:
        if not self._finished:
            raise BodyError("body ended before the JSON array was closed")
        return []

    def _cut(self, element: bytes, out: list[RawRecord], closing: bool) -> None:
        if self._dropped or len(element) > self._max:
            self._index += 1
            out.append((self._index, None))
        else:
            raw = element.strip(_WHITESPACE)
            if raw:
                self._index += 1
                out.append((self._index, raw))
            elif not closing or self._separators:
                raise BodyError(f"empty element in the JSON array after element {self._index}")
        if not closing:
            self._separators += 1
        self._dropped = False

    def _keep(self, buffer: bytes, element_start: int, resume: int) -> None:
        """Keep the current element's bytes while it is within the limit, else only the
        unscanned tail: a string cut by the chunk boundary, of which only what is needed to
        find its end is kept."""
        if not self._dropped and len(buffer) - element_start > self._max:
            self._dropped = True
        if self._dropped and buffer[resume:resume + 1] == b'"':
            self._in_string = True
            self._buffer, self._scanned = self._skip_string(buffer[resume + 1:]), 0
            return
        keep_from = resume if self._dropped else element_start
        self._buffer = buffer[keep_from:]
        self._scanned = resume - keep_from
        if len(self._buffer) > self._max:
            raise BodyError("a string in the body exceeds the record size limit")

    def _skip_string(self, buffer: bytes) -> bytes:
        """Skip the rest of a dropped string: what follows its closing quote, or (still inside
        it) the backslash whose escaped byte is yet to come."""
        end = _STRING_REST.match(buffer).end()
        if end < len(buffer) and buffer[end] == 0x22:
            self._in_string = False
            return buffer[end + 1:]
        return buffer[end:]

    @staticmethod
    def _check_trailing(data: bytes) -> None:
        if data.strip(_WHITESPACE):
            raise BodyError("unexpected data after the end of the JSON array")


def splitter_for(content_type: str, max_record_bytes: int) -> NdjsonSplitter | JsonArraySplitter:
    if content_type in NDJSON_TYPES:
        return NdjsonSplitter(max_record_bytes)
    return JsonArraySplitter(max_record_bytes)


NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl",
                          "application/x-jsonlines"})
JSON_TYPES = frozenset({"application/json"})
ACCEPTED_TYPES = NDJSON_TYPES | JSON_TYPES
