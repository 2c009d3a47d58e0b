"""Chunks written once laid out by column (server/telemetry/columns.py): every record comes
back byte for byte, whatever a router sent; the corpus's records take fewer bytes."""

from __future__ import annotations

import json
import random

import orjson
import pytest
import zstandard

from bench.chunk_layout import bodies_of, measure
from bench.storage import corpus_lines, record_stream
from server.telemetry import columns
from server.telemetry.chunks import COMPACT_LEVEL, INGEST_LEVEL, compress, decompress


@pytest.mark.parametrize("size", [500, 1000])
def test_the_corpus_comes_back_exactly_in_fewer_bytes(size):
    """Against the same records one per line at the same level: 10 % fewer bytes at least
    (15-20 % measured, docs/telemetry.md)."""
    lines = corpus_lines()
    laid_out = as_lines = 0
    for start in range(0, len(lines), size):
        body = lines[start:start + size]
        packed = compress(body, COMPACT_LEVEL)
        assert zstandard.ZstdDecompressor().decompress(packed).startswith(columns.MAGIC)
        assert decompress(packed) == body
        laid_out += len(packed)
        as_lines += len(zstandard.ZstdCompressor(level=COMPACT_LEVEL).compress(
            b"\n".join(body) + b"\n"))
    assert laid_out < 0.9 * as_lines


ODD = [
    b'{"a": 1, "b": "spaces, not compact"}',
    b'{}',
    b'{"a":{}}',
    b'{"a":[]}',
    b'{"a":[{"x":1,"b":2}],"b":3}',        # a value holding the piece after it
    b'{"a":"x\\",\\"b\\":","b":{"c":1}}',   # ... inside a string
    b'{"a":"100%","b":"%b%%s%","c":"%"}',
    b'{"\xc3\xa9":"\xc3\xa9","e":"\\u00e9","s":"a\\/b"}',
    b'{"a":1,"a":2}',                       # a key twice
    b'{"a\\"b":1,"c":-0.0,"d":1e5,"e":1.0,"f":true,"g":null,"h":false}',
    b'{"big":1180591620717411303424}',      # beyond 64 bits
    b'[1,2]',
    b'"a string"',
    b'not json at all',
    b'',
    b'{"a":1}  ',
    b'{"nested":' * 40 + b'1' + b'}' * 40,
    b'{' + b','.join(b'"k%d":%d' % (n, n) for n in range(3000)) + b'}',
    b'{"flow_id":1,"x":{"y":{"z":[1,{"w":{}}]}},"end":"}"}',
]


def test_odd_records_come_back_exactly():
    for line in ODD:
        assert decompress(compress([line], COMPACT_LEVEL)) == [line], line
    mixed = ODD * 3 + corpus_lines()[:200] + ODD
    assert decompress(compress(mixed, COMPACT_LEVEL)) == mixed


def _value(rng: random.Random, depth: int):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.randint(-2**63, 2**63 - 1)
    if kind == 1:
        return rng.random() * 10 ** rng.randint(-5, 20)
    if kind == 2:
        return "".join(rng.choice('ab",:{}[]%\\/\u00e9\u2028 \t') for _ in range(rng.randrange(8)))
    if kind == 3:
        return rng.choice([True, False, None])
    if kind in (4, 5):
        return rng.randrange(1000)
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["a", "b", "flow_id", "c\"d", "%b", ""]) + str(rng.randrange(3)):
            _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_random_records_come_back_exactly():
    rng = random.Random(59)
    lines = []
    for n in range(3000):
        record = {"event_type": rng.choice(["alert", "flow", "dns"]),
                  **{f"k{rng.randrange(12)}": _value(rng, 0) for _ in range(rng.randrange(8))}}
        # compact as Suricata writes, or with spaces as another agent might
        lines.append(orjson.dumps(record) if n % 3 else
                     json.dumps(record, ensure_ascii=n % 2 == 0).encode())
    for start in range(0, len(lines), 700):
        body = lines[start:start + 700]
        assert decompress(compress(body, COMPACT_LEVEL)) == body


def test_more_shapes_than_a_body_may_have_are_kept_whole():
    lines = [b'{"shape%d":%d,"v":"x"}' % (n, n) for n in range(columns.MAX_SHAPES * 3)]
    text = columns.encode(lines)
    assert text.split(b"\n")[1] == b"%d %d" % (len(lines), columns.MAX_SHAPES)
    assert columns.decode(text) == lines


def test_a_text_cut_short_or_with_bytes_to_spare_is_refused():
    text = columns.encode(corpus_lines()[:50])
    for damaged in (text[:-40], text + b"extra\n", text.replace(b"\n", b"\n\n", 1)):
        with pytest.raises(ValueError):
            columns.decode(damaged)


def test_chunks_of_before_are_read_as_lines():
    lines = corpus_lines()[:20]
    before = zstandard.ZstdCompressor(level=COMPACT_LEVEL).compress(b"\n".join(lines) + b"\n")
    assert decompress(before) == lines
    assert decompress(compress(lines, INGEST_LEVEL)) == lines
    assert columns.decode(columns.encode([])) == []


def test_the_layout_benchmark_reads_every_record_back():
    """bench/chunk_layout.py, small: both layouts read back every record (it asserts
    so) and the columns take fewer bytes on the storage benchmark's records."""
    figures = measure(bodies_of(record_stream(3000), 500), rounds=1)
    assert figures["columns"][0] < 0.95 * figures["lines"][0]


def test_records_of_long_keys_come_back_exactly():
    """Each its own shape of one 256 KB key (a regular expression compiled a shape took
    7 s for these 16 and kept 100 MB in `re`'s cache; found by a hostile review)."""
    lines = [b'{"%d' % n + b"a" * 262_144 + b'":1}' for n in range(16)]
    assert decompress(compress(lines, COMPACT_LEVEL)) == lines
