"""Record framing: every chunk boundary gives the same records as one whole body."""

from __future__ import annotations

import json
import random

import orjson
import pytest

from server.ingest.records import BodyError, JsonArraySplitter, NdjsonSplitter

RECORDS = [
    {"a": 1},
    {"s": "quote \" bracket ] brace } comma , backslash \\", "n": [1, [2, {"x": "]"}]]},
    {"unicode": "r\u00e9seau \u2603", "empty": {}, "list": []},
    {"deep": {"deeper": {"deepest": [{"k": "v"}]}}},
]


def run(splitter, body: bytes, chunk: int) -> list:
    out = []
    for start in range(0, len(body), chunk):
        out += splitter.feed(body[start:start + chunk])
    return out + splitter.close()


@pytest.mark.parametrize("indent", [None, 2])
def test_array_same_records_for_every_chunk_size(indent):
    body = json.dumps(RECORDS, indent=indent).encode()
    for chunk in range(1, len(body) + 1):
        records = run(JsonArraySplitter(10_000), body, chunk)
        assert [orjson.loads(raw) for _, raw in records] == RECORDS, chunk
        assert [n for n, _ in records] == [1, 2, 3, 4]


def test_ndjson_same_records_for_every_chunk_size():
    body = b"\n".join(orjson.dumps(r) for r in RECORDS) + b"\n\n"
    for chunk in range(1, len(body) + 1):
        records = run(NdjsonSplitter(10_000), body, chunk)
        assert [orjson.loads(raw) for _, raw in records] == RECORDS, chunk


def test_ndjson_last_line_without_newline_and_crlf():
    records = run(NdjsonSplitter(100), b'{"a":1}\r\n\r\n{"b":2}', 3)
    assert [(n, orjson.loads(raw)) for n, raw in records] == [(1, {"a": 1}), (3, {"b": 2})]


def test_ndjson_oversized_line_dropped_as_it_streams():
    splitter = NdjsonSplitter(50)
    body = b'{"a":1}\n' + b"x" * 10_000 + b'\n{"b":2}\n'
    records = run(splitter, body, 7)
    assert [(n, raw) for n, raw in records] == [(1, b'{"a":1}'), (2, None), (3, b'{"b":2}')]
    assert len(splitter._pending) == 0


def test_array_oversized_element_dropped_and_buffer_bounded():
    big = orjson.dumps({"pad": ["y" * 40] * 500})
    body = b"[" + orjson.dumps({"a": 1}) + b"," + big + b"," + orjson.dumps({"b": 2}) + b"]"
    splitter = JsonArraySplitter(200)
    out = []
    for start in range(0, len(body), 64):
        out += splitter.feed(body[start:start + 64])
        assert len(splitter._buffer) <= 200 + 64
    assert [raw is None for _, raw in out] == [False, True, False]


def test_array_string_over_the_limit_drops_only_its_element_wherever_the_chunks_end():
    """A string longer than the record limit used to fail the whole body when a chunk ended
    inside it; now its element alone is rejected, wherever the chunks end (escapes too)."""
    small = orjson.dumps({"q": "a,b]c"})
    long_string = orjson.dumps({"pad": 'x\\"y' * 40, "n": [1, {"a": "b"}]})  # 40 escapes
    body = b"[" + b",".join([small, long_string, small, b'"' + b"s" * 300 + b'"', small]) + b"]"
    for chunk in (1, 2, 3, 5, 64, 100, len(body)):
        splitter = JsonArraySplitter(100)
        records = run(splitter, body, chunk)
        assert [raw and orjson.loads(raw) for _, raw in records] == [
            {"q": "a,b]c"}, None, {"q": "a,b]c"}, None, {"q": "a,b]c"}], chunk
        assert len(splitter._buffer) <= 100


@pytest.mark.parametrize("body", [b"{}", b"[{}", b"[{},]", b"[,{}]", b"[{}]x", b"[{}}]",
                                  b'"text"', b"[" + b'"' + b"z" * 500])
def test_array_framing_errors(body):
    with pytest.raises(BodyError):
        run(JsonArraySplitter(100), body, 16)


def test_empty_array_and_scalars_pass_framing():
    assert run(JsonArraySplitter(100), b"  [ ]  ", 2) == []
    assert [raw for _, raw in run(JsonArraySplitter(100), b"[1, \"x\", null]", 2)] == \
        [b"1", b'"x"', b"null"]


def test_random_bodies_match_whole_parse():
    rng = random.Random(7)
    for _ in range(200):
        records = [{"k": rng.choice(["[", "]", "{", "}", ",", '"', "\\", "x"]) * rng.randint(0, 5),
                    "n": [rng.randint(0, 9)] * rng.randint(0, 3)} for _ in range(rng.randint(0, 6))]
        body = json.dumps(records, indent=rng.choice([None, 1])).encode()
        got = run(JsonArraySplitter(10_000), body, rng.randint(1, 40))
        assert [orjson.loads(raw) for _, raw in got] == records


def reference_lines(body: bytes, limit: int) -> list:
    """What the NDJSON splitter must give: every line numbered, blank ones left out."""
    return [(number, None if len(line) > limit else line)
            for number, line in enumerate(body.split(b"\n"), start=1)
            if len(line) > limit or line.strip()]


def test_ndjson_random_bodies_with_runs_of_blank_lines_match_the_reference():
    rng = random.Random(46)
    pieces = [b"\n", b"\n" * 5, b"{}", b"rec", b" ", b"\r", b"x" * 30, b"\n\n"]
    for _ in range(2000):
        body = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40)))
        splitter = NdjsonSplitter(20)
        got, position = [], 0
        while position < len(body):
            step = rng.randrange(1, 12)
            got += splitter.feed(body[position:position + step])
            position += step
        got += splitter.close()
        assert got == reference_lines(body, 20), body


def test_ndjson_too_many_whitespace_lines_are_refused():
    splitter = NdjsonSplitter(1024)
    with pytest.raises(BodyError, match="lines of nothing but whitespace"):
        splitter.feed(b"{}\n" + b" \n" * 10_001)
