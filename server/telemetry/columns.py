"""A chunk's records laid out by column before zstd: each record cut into its skeleton (the
keys and punctuation, shared by every record of the same shape) and the texts of its values,
and the values of one key stored together. zstd then finds each column's regularities (a
router's timestamps, its addresses, its ports) instead of the same keys at every record: on
the corpus's EVE records 15-20 % fewer bytes at the same level than the records one per line
(docs/telemetry.md). Nothing of a record is parsed back: a record is cut only where its own
bytes equal its skeleton's, so joining the pieces gives its bytes exactly, whatever the JSON
library of the day would write; a record no skeleton cuts is kept whole. Our own code, since
the columnar formats that exist (Parquet, Arrow) keep parsed values, not the bytes a router
sent, which the service keeps as received.

The layout (text lines; no record holds a newline, server/telemetry/chunks.py `one_line`):
MAGIC; "<records> <shapes>"; each shape as "<pieces>" and its pieces, one a line; the shape
of each record ("-1": kept whole), space-separated; the records kept whole; then, shape
after shape, each of its value slots: one line a record of that shape.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import repeat

import orjson

# No record begins with a NUL byte (JSON text holds none), so a plain chunk never does.
MAGIC = b"\x00columns 1\n"
# Bounds on what a body's records may cost to cut; records beyond are kept whole.
MAX_SHAPES = 64      # a body's shapes
MAX_SLOTS = 1024     # a shape's values
MAX_BODY_SLOTS = 4096  # the values of all of a body's shapes
MAX_DEPTH = 16       # objects nested deeper: the record is kept whole
# A shape whose pieces (its keys) take at most this is cut by a compiled regular expression
# (9 µs an EVE record against 16 by `bytes.find` a piece in Python: EVE's shapes take
# 150-400 bytes, Suricata's stats records' 5-7 KB); a larger one by `bytes.find`, since
# compiling costs 1.7 µs a byte of its keys and stays in `re`'s cache (a hostile review:
# 16 records of 256 KB keys, 7 s and 100 MB).
PATTERN_BYTES = 1_024
GUESSES = 4          # shapes tried, of those of records with as many keys and objects,
                     # before a record is parsed to find its own


class _Unfit(Exception):
    """A record this layout does not cut: it is kept whole."""


class _Shape:
    def __init__(self, pieces: tuple[bytes, ...]):
        self.pieces = pieces
        self._inner = [(piece, len(piece)) for piece in pieces[1:-1]]
        self._pattern = _pattern(pieces) if sum(map(len, pieces)) <= PATTERN_BYTES else None
        self.rows: list[tuple[bytes, ...]] = []
        self.number: int | None = None   # in the encoded text, once it has a record

    def cut(self, line: bytes) -> tuple[bytes, ...] | None:
        """`line`'s values, each running to the first occurrence of the piece after it (the
        last to the record's end piece), if `line` is this shape's pieces and values in
        turn; else None."""
        if self._pattern is not None:
            match = self._pattern.fullmatch(line)
            return match.groups() if match else None
        first, last = self.pieces[0], self.pieces[-1]
        if not line.startswith(first):
            return None
        if len(self.pieces) == 1:
            return () if len(line) == len(first) else None
        find, values = line.find, []
        position = len(first)
        for piece, size in self._inner:
            end = find(piece, position)
            if end < 0:
                return None
            values.append(line[position:end])
            position = end + size
        last_end = len(line) - len(last)
        if last_end < position or not line.endswith(last):
            return None
        values.append(line[position:last_end])
        return tuple(values)


def _pattern(pieces: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """The same cut as a regular expression: atomic groups, so a piece once found is not
    given back (linear in the record's length whatever it holds)."""
    inner = b"".join(b"(?>(.*?)" + re.escape(piece) + b")" for piece in pieces[1:-1])
    last = b"(.*)" + re.escape(pieces[-1]) if len(pieces) > 1 else b""
    return re.compile(re.escape(pieces[0]) + inner + last, re.S)


def encode(lines: list[bytes]) -> bytes:
    shapes: dict[tuple[bytes, ...], _Shape] = {}
    guesses: dict[tuple[int, int], list[_Shape]] = {}
    ids: list[int] = []
    whole: list[bytes] = []
    ordered: list[_Shape] = []
    for line in lines:
        shape, values = _place(line, shapes, guesses)
        if shape is None:
            ids.append(-1)
            whole.append(line)
            continue
        if shape.number is None:
            shape.number = len(ordered)
            ordered.append(shape)
        shape.rows.append(values)
        ids.append(shape.number)
    out = [MAGIC, b"%d %d\n" % (len(lines), len(ordered))]
    for shape in ordered:
        out.append(b"%d\n" % len(shape.pieces))
        out += [piece + b"\n" for piece in shape.pieces]
    out.append(b" ".join(b"%d" % number for number in ids) + b"\n")
    out += [line + b"\n" for line in whole]
    for shape in ordered:
        for column in zip(*shape.rows):
            out += [value + b"\n" for value in column]
    return b"".join(out)


def _place(line: bytes, shapes: dict[tuple[bytes, ...], _Shape],
           guesses: dict[tuple[int, int], list[_Shape]]
           ) -> tuple[_Shape | None, tuple[bytes, ...]]:
    """The shape that cuts `line` and its values; (None, ()) to keep it whole. Parsing a
    record costs more than trying a few shapes: those of the last records with as many
    keys (a string and a colon, roughly) and objects are tried first."""
    likely = guesses.setdefault((line.count(b'":'), line.count(b"{")), [])
    for guess in likely:
        if (values := guess.cut(line)) is not None:
            return guess, values
    try:
        pieces = skeleton(line)
    except _Unfit:
        return None, ()
    shape = shapes.get(pieces)
    if shape is None:
        slots = sum(len(known.pieces) - 1 for known in shapes.values()) + len(pieces) - 1
        if len(shapes) >= MAX_SHAPES or slots > MAX_BODY_SLOTS:
            return None, ()
        shape = shapes[pieces] = _Shape(pieces)
    values = shape.cut(line)
    if values is None:
        return None, ()
    likely.insert(0, shape)
    del likely[GUESSES:]
    return shape, values


def skeleton(line: bytes) -> tuple[bytes, ...]:
    """The pieces between the values of `line` written as compact JSON (as Suricata writes
    EVE): `{"a":1,"b":{"c":"x"}}` gives `{"a":`, `,"b":{"c":`, `}}`. A value is anything
    but a non-empty object."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise _Unfit from None
    if type(record) is not dict:
        raise _Unfit
    pieces = [b""]
    _object(record, pieces, 0)
    if len(pieces) - 1 > MAX_SLOTS:
        raise _Unfit
    return tuple(pieces)


def _object(record: dict, pieces: list[bytes], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _Unfit
    pieces[-1] += b"{"
    for number, (key, value) in enumerate(record.items()):
        pieces[-1] += (b"," if number else b"") + orjson.dumps(key) + b":"
        if type(value) is dict and value:
            _object(value, pieces, depth + 1)
        else:
            pieces.append(b"")   # a value's slot; the next piece follows it
    pieces[-1] += b"}"


def decode(text: bytes) -> list[bytes]:
    """The records of an `encode`d text, each exactly as it was; ValueError if the text is
    not whole."""
    if not text.startswith(MAGIC):
        raise ValueError("not a chunk laid out by column")
    parts = text[len(MAGIC):].split(b"\n")
    count, shape_count = (int(number) for number in parts[0].split())
    position, templates, slot_counts = 1, [], []
    for _ in range(shape_count):
        size = int(parts[position])
        pieces = parts[position + 1:position + 1 + size]
        templates.append(b"%b".join(piece.replace(b"%", b"%%") for piece in pieces))
        slot_counts.append(size - 1)
        position += 1 + size
    ids = [int(number) for number in parts[position].split()]
    position += 1
    rows = Counter(ids)
    whole = iter(parts[position:position + rows[-1]])
    position += rows[-1]
    shape_rows = []
    for number, slots in enumerate(slot_counts):
        columns = [parts[position + slot * rows[number]:position + (slot + 1) * rows[number]]
                   for slot in range(slots)]
        position += slots * rows[number]
        shape_rows.append(zip(*columns) if slots else repeat((), rows[number]))
    if len(ids) != count or position != len(parts) - 1 or parts[-1]:
        raise ValueError("a chunk laid out by column is cut short or has bytes to spare")
    return [next(whole) if number < 0 else templates[number] % next(shape_rows[number])
            for number in ids]
