"""Batches waiting on disk to be sent, oldest first: one gzip NDJSON file per batch, named
`<sequence>.<kind>.<records>.<key>.ndjson.gz`, written atomically before the agent's position
in eve.json moves past its lines, and removed once the server answered for it.

Full (over spool_max_bytes): the oldest batches are dropped, logged and counted, so that
a long outage costs the oldest telemetry, never the newest, and never the router's disk.
"""

from __future__ import annotations

import gzip
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from agent.files import sync_directory, write_atomically

log = logging.getLogger("router_agent.spool")

_NAME = re.compile(r"(\d{12})\.(events|cfm)\.(\d+)\.([A-Za-z0-9-]+)\.ndjson\.gz")


@dataclass(frozen=True)
class Batch:
    path: Path
    sequence: int
    kind: str       # "events" (POST /log/events) or "cfm" (POST /log/cfm)
    records: int
    key: str        # its Idempotency-Key

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    def body(self) -> bytes:
        return self.path.read_bytes()  # gzip: sent as it is, Content-Encoding: gzip


class Spool:
    def __init__(self, directory: Path, max_bytes: int):
        self.directory = directory
        self.max_bytes = max_bytes
        directory.mkdir(parents=True, exist_ok=True)

    def add(self, sequence: int, kind: str, key: str, lines: list[bytes]) -> Batch:
        name = f"{sequence:012d}.{kind}.{len(lines)}.{key}.ndjson.gz"
        body = gzip.compress(b"\n".join(lines) + b"\n", compresslevel=6, mtime=0)
        write_atomically(self.directory / name, body, 0o600)
        return self._batch(self.directory / name)

    def batches(self) -> list[Batch]:
        found = [self._batch(path) for path in self.directory.iterdir()
                 if _NAME.fullmatch(path.name)]
        return sorted(found, key=lambda batch: batch.sequence)

    def remove(self, batch: Batch) -> None:
        batch.path.unlink(missing_ok=True)
        sync_directory(self.directory)

    def size(self) -> int:
        return sum(batch.size for batch in self.batches())

    def drop_oldest_beyond_cap(self) -> list[Batch]:
        """Drop the oldest batches until the spool fits max_bytes; the dropped ones."""
        batches = self.batches()
        total = sum(batch.size for batch in batches)
        dropped = []
        while batches and total > self.max_bytes:
            oldest = batches.pop(0)
            total -= oldest.size
            self.remove(oldest)
            dropped.append(oldest)
        if dropped:
            log.warning("spool over %d bytes: dropped the %d oldest batches (%d records)",
                        self.max_bytes, len(dropped), sum(b.records for b in dropped))
        return dropped

    @staticmethod
    def _batch(path: Path) -> Batch:
        sequence, kind, records, key = _NAME.fullmatch(path.name).groups()
        return Batch(path, int(sequence), kind, int(records), key)
