"""The complete lines Suricata appended to eve.json since the agent's position.

A position names a file by device and inode and gives it a random `file_id` when the agent
first reads it; a batch's Idempotency-Key is `<file_id>-<start>-<end>` (byte offsets), so
reading the same bytes again after a crash gives the same key, and no two files (an inode
number reused, a file truncated and written again) ever share one.

Rotation (eve.json renamed to eve.json.1 ..., a new eve.json created): the rest of the
renamed file is read first, found among eve.json.* by its inode, then each file written
after it, oldest first by modification time (however many rotations happened meanwhile,
whatever the naming scheme), each from its start.

Truncation (copytruncate): the file is read again from its start, under a new file_id; it
is recognised by a size below the position or, when it grew back past it before the agent
looked, by other first bytes than those it kept.

Each read's end is saved before its lines are spooled, so a crash between the two reads the
same bytes again, not more that arrived meanwhile: the same key, replayed by the server.

A last line without its newline waits for the next read. A line longer than the batch's
byte budget is still read whole (the server rejects records over its own limit).
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
        position = self.position
        if position is None:
            return self._start_reading(self.path)
        here = self._file_of(position)
        if here == self.path and self._truncated():
            log.warning("%s was truncated; reading it again from its start", self.path)
            return self._start_reading(self.path)
        if here is not None:
            if chunk := self._read(here):
                return chunk
            if here == self.path:
                return None  # nothing new yet
        following = self._following(position, here)  # the file was rotated: the next one
        if following is None:
            return None
        log.info("%s was rotated; reading %s from its start", self.path, following)
        return self._start_reading(following)

    def _start_reading(self, path: Path) -> Chunk | None:
        stat = _stat(path)
        if stat is None:
            return None
        self.position = {"device": stat.st_dev, "inode": stat.st_ino, "offset": 0,
                         "file_id": secrets.token_hex(6), "head": "",
                         "mtime_ns": stat.st_mtime_ns}
        self._persist(self.position)
        return self._read(path)

    def _files(self) -> list[tuple[Path, os.stat_result]]:
        """eve.json and its rotated siblings (eve.json.1 ...; compressed ones left out)."""
        found = []
        for path in [self.path, *self.path.parent.glob(f"{self.path.name}.*")]:
            if path.suffix not in (".gz", ".xz", ".bz2", ".zst", ".tmp") and \
                    (stat := _stat(path)) is not None:
                found.append((path, stat))
        return found

    def _file_of(self, position: dict) -> Path | None:
        for path, stat in self._files():
            if (stat.st_dev, stat.st_ino) == (position["device"], position["inode"]):
                return path
        return None

    def _following(self, position: dict, finished: Path | None) -> Path | None:
        """The oldest file written after the finished one: rotations are read in order,
        however many happened since (by modification time, whatever the naming scheme)."""
        stat = _stat(finished) if finished is not None else None
        after = stat.st_mtime_ns if stat else position.get("mtime_ns", 0)
        newer = [(stat.st_mtime_ns, path) for path, stat in self._files()
                 if stat.st_mtime_ns > after or (path == self.path and stat.st_ino !=
                                                 position["inode"])]
        return min(newer)[1] if newer else None

    def _truncated(self) -> bool:
        stat = _stat(self.path)
        return stat is not None and (stat.st_size < self.position["offset"]
                                     or not self._same_head())

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

    def _read(self, path: Path) -> Chunk | None:
        start, until = self.position["offset"], self.position.get("until")
        try:
            with open(path, "rb") as eve:
                stat = os.fstat(eve.fileno())
                if stat.st_ino != self.position["inode"]:
                    return None  # replaced between the stat and the open: next time
                eve.seek(start)
                if until is not None:  # a read the agent died spooling: its bytes exactly
                    data = eve.read(until - start)
                else:
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
        # Saved before the caller spools: a crash before it saves the position past these
        # lines reads them again as they are, under this key (the file grows meanwhile).
        self._persist({**self.position, "until": end})
        after = {**self.position, "offset": end, "head": head, "mtime_ns": stat.st_mtime_ns}
        after.pop("until", None)
        return Chunk(lines, key, after)

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
