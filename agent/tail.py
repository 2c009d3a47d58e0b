"""The complete lines Suricata appended to eve.json since the agent's position.

A position names a file by device and inode and gives it a random `file_id` when the agent
first reads it; a batch's Idempotency-Key is `<file_id>-<start>-<end>` (byte offsets), so
reading the same bytes again after a crash gives the same key, and no two files (an inode
number reused, a file truncated and written again) ever share one.

Rotation (eve.json renamed to eve.json.1 ..., a new eve.json created): the rest of the
renamed file is read first, found among eve.json.* by its inode, then the new file from its
start. Truncation (copytruncate): the file is read again from its start, under a new
file_id; it is recognised by a size below the position or, when it grew back past it before
the agent looked, by other first bytes than those it kept. A last line without its newline waits for the next read. A line longer than the
batch's byte budget is still read whole (the server rejects records over its own limit).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("router_agent.tail")

READ_STEP = 1024 * 1024
HEAD_BYTES = 64  # the file's first bytes, kept to recognise it after a truncation


@dataclass(frozen=True)
class Chunk:
    lines: list[bytes]   # complete lines, without their newlines
    key: str             # the Idempotency-Key of the batches made of these lines
    position: dict       # the position after these lines


class EveTail:
    def __init__(self, path: Path, position: dict | None, max_lines: int, max_bytes: int,
                 persist: Callable[[dict], None]):
        self.path = path
        self.position = position
        self._max_lines = max_lines
        self._max_bytes = max_bytes
        self._persist = persist  # a new file's position is saved before it is read

    def read(self) -> Chunk | None:
        """The next lines (at most max_lines, about max_bytes), or None when none is new.
        The caller saves `chunk.position` once the lines are safe (spooled)."""
        stat = _stat(self.path)
        current = None if stat is None else (stat.st_dev, stat.st_ino)
        position = self.position
        if position is not None and current == (position["device"], position["inode"]):
            if stat.st_size < position["offset"] or not self._same_head():
                log.warning("%s was truncated; reading it again from its start", self.path)
                self._start(current)
            return self._read(self.path)
        if position is not None and (rotated := self._rotated(position)) is not None:
            if chunk := self._read(rotated):
                return chunk
        if current is None:
            return None
        if position is not None:
            log.info("%s was rotated; reading the new file from its start", self.path)
        self._start(current)
        return self._read(self.path)

    def _start(self, identity: tuple[int, int]) -> None:
        self.position = {"device": identity[0], "inode": identity[1], "offset": 0,
                         "file_id": secrets.token_hex(6), "head": ""}
        self._persist(self.position)

    def _same_head(self) -> bool:
        """Whether the file still starts with the bytes it started with: a file truncated
        and written again past the position before this read has another beginning."""
        head = self.position.get("head", "")
        if not head:
            return True
        try:
            with open(self.path, "rb") as eve:
                start = eve.read(len(head) // 2)
        except FileNotFoundError:
            return True
        return start.hex() == head

    def _rotated(self, position: dict) -> Path | None:
        for candidate in sorted(self.path.parent.glob(f"{self.path.name}.*")):
            stat = _stat(candidate)
            if stat is not None and (stat.st_dev, stat.st_ino) == (position["device"],
                                                                    position["inode"]):
                return candidate
        return None

    def _read(self, path: Path) -> Chunk | None:
        start = self.position["offset"]
        try:
            with open(path, "rb") as eve:
                if os.fstat(eve.fileno()).st_ino != self.position["inode"]:
                    return None  # replaced between the stat and the open: next time
                eve.seek(start)
                data = eve.read(self._max_bytes)
                if b"\n" not in data:  # one line longer than the budget, or none complete
                    data += _rest_of_line(eve)
        except FileNotFoundError:
            return None
        lines = data.split(b"\n")[:-1][:self._max_lines]  # complete lines only
        if not lines:
            return None
        end = start + sum(len(line) + 1 for line in lines)
        key = f"{self.position['file_id']}-{start}-{end}"
        head = self.position.get("head") or (data[:HEAD_BYTES].hex() if start == 0 else "")
        return Chunk(lines, key, {**self.position, "offset": end, "head": head})

    def advance(self, position: dict) -> None:
        self.position = position


def _rest_of_line(eve) -> bytes:
    pieces = []
    while more := eve.read(READ_STEP):
        pieces.append(more)
        if b"\n" in more:
            break
    return b"".join(pieces)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
