"""Read a request body as a stream of decoded chunks, with the size cap applied after decoding.

Nothing here holds more than one network chunk plus one bounded piece of gzip output, so a
body of any size, or a gzip bomb, costs the same memory.
"""

from __future__ import annotations

import zlib
from typing import AsyncIterator

from aiohttp import web

from server.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

DECODED_PIECE_BYTES = 256 * 1024


def _check_declared_length(request: web.Request, max_bytes: int) -> None:
    if request.content_length is not None and request.content_length > max_bytes:
        raise PayloadTooLarge(f"body of {request.content_length} bytes exceeds the limit of "
                           f"{max_bytes} bytes")


async def decoded_chunks(request: web.Request, max_bytes: int) -> AsyncIterator[bytes]:
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip"):
        raise UnsupportedMediaType(f"unsupported Content-Encoding {encoding!r} "
                                  "(use gzip or none)")
    _check_declared_length(request, max_bytes)
    total = 0
    inflate = _GzipStream() if encoding != "identity" else None
    try:
        async for chunk in request.content.iter_any():
            pieces = inflate.feed(chunk) if inflate else (chunk,)
            for piece in pieces:
                total += len(piece)
                if total > max_bytes:
                    raise PayloadTooLarge(f"body exceeds the limit of {max_bytes} bytes")
                yield piece
    except ConnectionError as error:
        raise BadRequest(f"body ended early: {error}") from error
    if inflate:
        inflate.finish()


class _GzipStream:
    """Incremental gzip decoding; concatenated members (valid gzip) are decoded in turn."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self._seen_any = False

    def feed(self, data: bytes):
        self._seen_any = self._seen_any or bool(data)
        while data:
            try:
                piece = self._inflate.decompress(data, DECODED_PIECE_BYTES)
            except zlib.error as error:
                raise BadRequest(f"body is not valid gzip: {error}") from None
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
            raise BadRequest("gzip body is truncated")
