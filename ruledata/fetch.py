"""Download the version stamp and the rule archive, with timeouts, retries and a size cap.

`http(s)://` URLs go through aiohttp; `file://` URLs (a local mirror) are read from disk.
Connection failures, timeouts and 5xx answers are retried with backoff; 4xx answers are not.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import aiohttp

log = logging.getLogger("router_backend.ruledata")

ATTEMPTS = 3
BACKOFF_SECONDS = 1.0
TIMEOUT = aiohttp.ClientTimeout(total=None, connect=15, sock_connect=15, sock_read=60)
MAX_VERSION_BYTES = 256


class FetchError(Exception):
    """The source could not be fetched; the message names the URL and the cause."""


class _Permanent(Exception):
    pass


async def _with_retries(url: str, action):
    delay = BACKOFF_SECONDS
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await action()
        except _Permanent as error:
            raise FetchError(f"{url}: {error}") from None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
            reason = str(error) or type(error).__name__
            if attempt == ATTEMPTS:
                raise FetchError(f"{url}: {reason} (after {ATTEMPTS} attempts)") from None
            log.warning("fetching %s failed (%s); retrying in %.0fs", url, reason, delay)
            await asyncio.sleep(delay)
            delay *= 2


def _check_status(response: aiohttp.ClientResponse) -> None:
    if response.status >= 500:
        raise aiohttp.ClientResponseError(response.request_info, (), status=response.status,
                                          message=f"HTTP {response.status}")
    if response.status >= 400:
        raise _Permanent(f"HTTP {response.status}")


def _local_path(url: str) -> Path | None:
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


async def fetch_version(session: aiohttp.ClientSession, url: str) -> str:
    async def attempt() -> bytes:
        local = _local_path(url)
        if local is not None:
            return local.read_bytes()[:MAX_VERSION_BYTES + 1]
        async with session.get(url, timeout=TIMEOUT) as response:
            _check_status(response)
            return await response.content.read(MAX_VERSION_BYTES + 1)

    raw = await _with_retries(url, attempt)
    version = raw.decode("utf-8", errors="replace").strip()
    if not version or len(raw) > MAX_VERSION_BYTES or not version.isprintable():
        raise FetchError(f"{url}: not a version stamp ({len(raw)} bytes)")
    return version


async def download(session: aiohttp.ClientSession, url: str, target: Path,
                   max_bytes: int) -> int:
    """Stream `url` into `target`; return its size. A body over `max_bytes` is refused."""
    async def attempt() -> int:
        local = _local_path(url)
        if local is not None:
            if local.stat().st_size > max_bytes:
                raise _Permanent(f"archive is larger than {max_bytes} bytes")
            shutil.copyfile(local, target)
            return target.stat().st_size
        async with session.get(url, timeout=TIMEOUT) as response:
            _check_status(response)
            if (response.content_length or 0) > max_bytes:
                raise _Permanent(f"archive is larger than {max_bytes} bytes")
            size = 0
            with target.open("wb") as out:
                async for chunk in response.content.iter_chunked(256 * 1024):
                    size += len(chunk)
                    if size > max_bytes:
                        raise _Permanent(f"archive is larger than {max_bytes} bytes")
                    out.write(chunk)
            return size

    return await _with_retries(url, attempt)
