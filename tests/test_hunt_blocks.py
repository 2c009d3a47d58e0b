"""The packed hunt index's block (server/hunt/blocks.py): every value's postings
read back as written, for sizes from one posting to a value every router of a large fleet
sees; a value not in the block is not found; a damaged block is refused."""

from __future__ import annotations

import numpy as np
import pytest

from server.hunt.blocks import Postings, decode, encode


def postings(rng: np.random.Generator, values: int, routers: int) -> Postings:
    hashes = rng.integers(-2**63, 2**63 - 1, values, dtype=np.int64)
    rows = []
    for value_hash in hashes.tolist():
        seen = np.unique(rng.integers(1, routers + 1, rng.integers(1, routers + 1)))
        rows += [(value_hash, router) for router in seen.tolist()]
    rows.sort()
    n = len(rows)
    return Postings(np.array([h for h, _ in rows], dtype=np.int64),
                    np.array([r for _, r in rows], dtype=np.uint32),
                    rng.integers(1, 2**31, n, dtype=np.uint32),
                    rng.integers(0, 86_400, n, dtype=np.uint32),
                    rng.integers(0, 86_400, n, dtype=np.uint32))


@pytest.mark.parametrize("values, routers", [(1, 1), (50, 3), (400, 300), (3, 240_000)])
def test_every_value_reads_back_as_written(values, routers):
    written = postings(np.random.default_rng(values), values, routers)
    block = decode(encode(written))
    for value_hash in np.unique(written.hashes).tolist():
        mine = written.hashes == value_hash
        found = block.find(value_hash)
        assert found is not None
        for column in ("routers", "records", "first", "span"):
            assert getattr(found, column).tolist() == getattr(written, column)[mine].tolist()
    absent = int(written.hashes.max()) + 1 if written.hashes.max() < 2**63 - 1 else 0
    assert block.find(absent) is None


def test_a_damaged_block_is_refused():
    data = encode(postings(np.random.default_rng(1), 5, 5))
    with pytest.raises(ValueError):
        decode(b"XX" + data[2:])
    with pytest.raises(Exception):
        decode(data[:-3])
