"""Read a request body as a stream of decoded pieces, with every limit applied as it arrives.

Nothing here holds more than one network chunk plus one bounded piece of decoded output, so a
body of any size, or a gzip bomb, costs the same memory. Pieces are at most PIECE_BYTES and
the event loop runs other requests as soon as YIELD_SECONDS have passed since it last did
(checked between pieces), so no body, however its bytes are chosen, holds the loop for long:
a piece of brackets, every byte a token for the record splitter, costs the most. Limits: the
decoded size, the gzip expansion ratio, and the longest pause between two network chunks (a
stalled body is cut off, so it never keeps a database transaction open).
"""

from __future__ import annotations

import asyncio
import time
import zlib
from dataclasses import dataclass
from typing import AsyncIterator, Iterator, Protocol

from server.ingest.errors import BodyStalled, BodyTooLarge, BodyUnreadable, FormatUnsupported

PIECE_BYTES = 4 * 1024
YIELD_SECONDS = 0.002
GZIP_FREE_BYTES = 64 * 1024  # decoded bytes allowed before the ratio applies
# No JSON text starts with these bytes: a body that does is gzip, whatever its headers say.
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class BodyLimits:
    max_bytes: int           # decoded
    idle_seconds: float      # longest wait for the next network chunk
    max_gzip_ratio: int      # decoded bytes per received byte


class ByteStream(Protocol):
    """The body as it arrives (aiohttp's request.content is one)."""

    async def readany(self) -> bytes: ...


@dataclass(frozen=True)
class Body:
    """A request body as the handler found it: its stream and what the headers said of it."""
    stream: ByteStream
    encoding: str                # Content-Encoding, lower-case; "identity" when none
    declared_length: int | None  # Content-Length


async def decoded_chunks(body: Body, limits: BodyLimits) -> AsyncIterator[bytes]:
    if body.encoding not in ("identity", "gzip", "x-gzip"):
        raise FormatUnsupported(f"unsupported Content-Encoding {body.encoding!r} "
                                   "(use gzip or none)")
    if body.declared_length is not None and body.declared_length > limits.max_bytes:
        raise BodyTooLarge(f"body of {body.declared_length} bytes exceeds the limit of "
                              f"{limits.max_bytes} bytes")
    decoded = received = 0
    inflate = _GzipStream() if body.encoding != "identity" else None
    yielded_at = time.perf_counter()
    while chunk := await _next_chunk(body.stream, limits.idle_seconds):
        if received == 0 and inflate is None and chunk.startswith(GZIP_MAGIC):
            inflate = _GzipStream()  # gzip sent without its header (curl --data-binary @x.gz)
        received += len(chunk)
        for piece in inflate.feed(chunk) if inflate else _slices(chunk):
            decoded += len(piece)
            if decoded > limits.max_bytes:
                raise BodyTooLarge(f"body exceeds the limit of {limits.max_bytes} bytes")
            if inflate and decoded > GZIP_FREE_BYTES + limits.max_gzip_ratio * received:
                raise BodyTooLarge(f"gzip body expands more than {limits.max_gzip_ratio} "
                                      "times its size")
            yield piece
            if time.perf_counter() - yielded_at > YIELD_SECONDS:
                await asyncio.sleep(0)  # let other requests run
                yielded_at = time.perf_counter()
    if inflate:
        inflate.finish()


async def _next_chunk(stream: ByteStream, idle_seconds: float) -> bytes:
    """The next network chunk (b"" at the end), or BodyStalled when none comes in time."""
    try:
        async with asyncio.timeout(idle_seconds):
            return await stream.readany()
    except TimeoutError:
        raise BodyStalled(f"body stalled: nothing received for {idle_seconds:g} s") from None
    except ConnectionError as error:
        raise BodyUnreadable(f"body ended early: {error}") from error


def _slices(chunk: bytes) -> Iterator[bytes]:
    if len(chunk) <= PIECE_BYTES:
        yield chunk
        return
    for start in range(0, len(chunk), PIECE_BYTES):
        yield chunk[start:start + PIECE_BYTES]


class _GzipStream:
    """Incremental gzip decoding; concatenated members (valid gzip) are decoded in turn."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self._seen_any = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._seen_any = self._seen_any or bool(data)
        while data:
            try:
                piece = self._inflate.decompress(data, PIECE_BYTES)
            except zlib.error as error:
                raise BodyUnreadable(f"body is not valid gzip: {error}") from None
            if piece:
                yield piece
            if self._inflate.eof:
                data = self._inflate.unused_data
                if data:
                    self._inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            else:
                data = self._inflate.unconsumed_tail

    def finish(self) -> None:
        if self._seen_any and not self._inflate.eof:
            raise BodyUnreadable("gzip body is truncated")
