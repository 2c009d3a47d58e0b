"""A feed's bytes from its URL, as a hostile server could serve them: a conditional GET
(the last good version's ETag and Last-Modified), a total timeout, a cap on the bytes read
after decoding (Content-Encoding, a .gz or one-member .zip body alike: a bomb stops at the
cap), and redirects followed only within the feed's own host and port (the operator's choice) or
to a host whose every address is public (resolved before the request: a name that resolves
otherwise at the moment of connecting, DNS rebinding, is not caught). Each
refusal is one line (FetchError); the caller keeps the previous version."""

from __future__ import annotations

import asyncio
import io
import ipaddress
import socket
import zipfile
import zlib
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import aiohttp

from engine.addresses import is_public

MAX_REDIRECTS = 3


class FetchError(Exception):
    """A fetch that gave no version; the message says why in one line."""


WEB_PAGES = ("text/html", "application/xhtml+xml")


@dataclass(frozen=True)
class Fetched:
    data: bytes | None       # None: not modified (304)
    etag: str | None
    last_modified: str | None


async def _public_host(host: str) -> bool:
    """Whether every address `host` names is public."""
    try:
        return is_public(str(ipaddress.ip_address(host)))
    except ValueError:
        pass
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, None,
                                                             type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(found) and all(is_public(info[4][0]) for info in found)


def _capped(data: bytes, limit: int) -> bytes:
    """A gzip or one-member zip body opened, at most `limit` bytes of it."""
    if data[:2] == b"\x1f\x8b":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            opened = inflater.decompress(data, limit + 1)
        except zlib.error as error:
            raise FetchError(f"the gzip body is damaged: {error}") from None
        if len(opened) > limit or inflater.unconsumed_tail:
            raise FetchError(f"the feed opens to more than {limit:,} bytes")
        if not inflater.eof:
            raise FetchError("the gzip body is truncated")
        return opened
    if data[:4] == b"PK\x03\x04":
        if _zip_entries(data) != 1:  # before zipfile reads a directory of a million entries
            raise FetchError("the zip holds more than one file (or its directory is damaged)")
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                members = archive.infolist()
                if len(members) != 1:
                    raise FetchError(f"the zip holds {len(members)} files, not one")
                with archive.open(members[0]) as member:
                    opened = member.read(limit + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise FetchError(f"the zip body is damaged: {error}") from None
        if len(opened) > limit:
            raise FetchError(f"the feed opens to more than {limit:,} bytes")
        return opened
    return data


MAX_ZIP_DIRECTORY = 65_536  # bytes: a one-entry directory is under 1 KiB in practice


def _zip_entries(data: bytes) -> int | None:
    """The entry count a zip's end-of-central-directory record gives, on this disk and in
    all (0 when they differ); None without a record, or with a directory larger than one
    entry's could be (a record saying one entry before a directory of a million)."""
    end = data.rfind(b"PK\x05\x06", max(0, len(data) - 65_557))
    if end < 0 or len(data) < end + 22:
        return None
    here, total, size = (int.from_bytes(data[end + 8:end + 10], "little"),
                         int.from_bytes(data[end + 10:end + 12], "little"),
                         int.from_bytes(data[end + 12:end + 16], "little"))
    if size > MAX_ZIP_DIRECTORY:
        return None
    return total if here == total else 0


async def _body(response: aiohttp.ClientResponse, limit: int) -> bytes:
    declared = response.content_length
    if declared is not None and declared > limit:
        raise FetchError(f"the feed is {declared:,} bytes, more than {limit:,}")
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(65536):
        size += len(chunk)
        if size > limit:
            raise FetchError(f"the feed is more than {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch(url: str, etag: str | None, last_modified: str | None, max_bytes: int,
                timeout_seconds: float) -> Fetched:
    """The feed at `url`, or not modified; FetchError saying why there is no version."""
    headers = {"User-Agent": "router-backend intel"}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    home = urlsplit(url).netloc
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    try:  # the timeout is the whole fetch's, every redirect of it
        async with asyncio.timeout(timeout_seconds), \
                aiohttp.ClientSession(timeout=timeout, auto_decompress=True) as session:
            for _ in range(MAX_REDIRECTS + 1):
                async with session.get(url, headers=headers, allow_redirects=False) as answer:
                    if answer.status in (301, 302, 303, 307, 308):
                        url = urljoin(url, answer.headers.get("Location", ""))
                        target = urlsplit(url)
                        if target.scheme not in ("http", "https") or not target.hostname:
                            raise FetchError(f"redirected to {url[:200]!r}: not http(s)")
                        if target.netloc != home and not await _public_host(target.hostname):
                            raise FetchError(f"redirected to {target.hostname[:100]!r}, "
                                             "which is not a public address")
                        continue
                    if answer.status == 304:
                        return Fetched(None, etag, last_modified)
                    if answer.status != 200:
                        raise FetchError(f"HTTP {answer.status} {answer.reason or ''}".strip())
                    if answer.content_type in WEB_PAGES:  # no feed format is a web page
                        raise FetchError(f"the server answered a web page "
                                         f"({answer.content_type}), not the feed (a sign-in "
                                         "or error page, or a feed that moved)")
                    body = await _body(answer, max_bytes)
                    data = await asyncio.to_thread(_capped, body, max_bytes)
                    return Fetched(data, answer.headers.get("ETag"),
                                   answer.headers.get("Last-Modified"))
            raise FetchError(f"more than {MAX_REDIRECTS} redirects")
    except asyncio.TimeoutError:
        raise FetchError(f"no whole answer within {timeout_seconds:g} s") from None
    except aiohttp.ClientPayloadError as error:
        raise FetchError(f"the body was cut short or damaged: {error}") from None
    except aiohttp.ClientError as error:
        raise FetchError(f"{type(error).__name__}: {error}"[:300]) from None
