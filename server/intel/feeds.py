"""A feed's new version taken, from its URL (the intel-fetch job, `intel fetch`) or from a
file (`intel import`): read in its format (server/intel/formats.py), each indicator given
its confidence and expiry, and swapped in whole (server/intel/sql.py swap_version). A fetch
that fails, a version that cannot be read, or one that gives no indicator from a feed that
had some, keeps the previous version and records why."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from urllib.parse import urljoin

from server.intel import sql as intel_db
from server.db.pool import Database, DatabaseUnavailable
from server.intel.fetching import FetchError, fetch
from server.intel.formats import FeedError, Version, bounded, json_document, misp_event, read
from server.intel.config import IntelConfig

log = logging.getLogger("router_backend.intel")

# An indicator's life when its feed gives no expiry, from its last sighting by the feed.
EXPIRY_DAYS = {"ip": 30, "network": 30, "domain": 180, "ja3": 365, "ja4": 365, "sha256": 365,
               "md5": 365}
LONGEST_LIFE = timedelta(days=2 * 365)
# That life lengthened by up to this share, by value: the values of one fetch do not all
# expire at once (a feed that stops answering leaves the document over days, not in one
# step: CrowdSec's imported batches expired together, cs-firewall-bouncer #509).
EXPIRY_SPREAD = 0.5
MISP_EVENTS_MAX = 1_000  # events of a MISP feed's manifest fetched, the newest first
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Taken:
    feed: str
    outcome: str          # taken, not modified, failed
    indicators: int = 0
    added: int = 0
    removed: int = 0
    refused: int = 0
    error: str | None = None

    def line(self) -> str:
        if self.outcome == "failed":
            return f"{self.feed}: kept the previous version: {self.error}"
        if self.outcome == "not modified":
            return f"{self.feed}: not modified"
        return (f"{self.feed}: {self.indicators:,} indicators ({self.added:,} new, "
                f"{self.removed:,} gone), {self.refused:,} lines refused")


def rows(version: Version, confidence: int, now: datetime) -> list[tuple]:
    """The version's indicators as swap_version takes them. A feed's times are clamped: no
    sighting later than now (a feed dating its values in the year 9000 would otherwise rank
    them first for ever), no expiry further than LONGEST_LIFE."""
    taken = []
    for entry in version.entries.values():
        first = min(entry.first_seen or entry.last_seen or now, now)
        last = min(max(entry.last_seen or first, first), now)
        expires = min(entry.expires_at or last + _life(entry.kind, entry.value),
                      now + LONGEST_LIFE)
        taken.append((entry.kind, entry.value, entry.confidence if entry.confidence is not None
                      else confidence, first, last, expires))
    return taken


def _life(kind: str, value: str) -> timedelta:
    """A value's life when its feed gives none: EXPIRY_DAYS of its kind, lengthened by a
    share of up to EXPIRY_SPREAD its own (the same at every fetch)."""
    share = zlib.crc32(f"{kind}:{value}".encode()) / 2**32
    return timedelta(days=EXPIRY_DAYS[kind] * (1 + EXPIRY_SPREAD * share))


async def _swap(db: Database, feed: intel_db.Feed, version: Version, etag: str | None,
                last_modified: str | None, actor: str, fetched: bool) -> Taken:
    """The version taken, unless it is none of the feed's format (more than half its lines
    not of it: a web page read as a plain list gave three of its links), gives no indicator
    from a feed that had some, or (fetched, not imported by an operator) drops most of the
    previous one of a feed that may not shrink."""
    if version.malformed * 2 > version.lines:
        raise FeedError(f"{version.malformed:,} of its {version.lines:,} lines are not "
                        f"{feed.format}: not a {feed.format} feed (a web page, or the wrong "
                        "format?)")
    if not version.entries and feed.indicators:
        raise FeedError(f"the new version gives no indicator ({version.lines:,} lines, "
                        f"{version.refused:,} refused)")
    taken = rows(version, feed.confidence, datetime.now(timezone.utc))
    try:
        added, removed = await intel_db.swap_version(
            db, feed.name, taken, version.lines, dict(version.refusals), etag, last_modified,
            actor, may_shrink=feed.may_shrink or not fetched)
    except intel_db.Shrunk as error:
        raise FeedError(str(error)) from None
    return Taken(feed.name, "taken", len(taken), added, removed, version.refused)


async def _misp_feed(manifest: bytes, url: str, config: IntelConfig) -> Version:
    """A MISP feed: its manifest's events (the newest MISP_EVENTS_MAX), each fetched."""
    events = json_document(manifest)
    if not isinstance(events, dict) or "Event" in events:
        raise FeedError("not a MISP feed manifest ({uuid: {...}}): a MISP feed's URL names "
                        "its manifest.json")
    newest = sorted(events, reverse=True, key=lambda uuid: str(
        events[uuid].get("timestamp", "") if isinstance(events[uuid], dict) else ""))
    version = Version()
    budget = config.feed_max_bytes - len(manifest)  # the whole feed's, all events
    deadline = time.monotonic() + config.fetch_timeout_seconds
    for uuid in newest[:MISP_EVENTS_MAX]:
        if not isinstance(uuid, str) or not _UUID.fullmatch(uuid.lower()):
            version.refuse("not an event uuid")
            continue
        left = deadline - time.monotonic()
        if budget <= 0 or left <= 0:
            raise FeedError(f"the feed's events are more than INTEL_FEED_MAX_BYTES "
                            f"({config.feed_max_bytes:,}) or take longer than "
                            f"INTEL_FETCH_TIMEOUT_SECONDS ({config.fetch_timeout_seconds})")
        try:  # an event not fetched fails the version (a server refusing some of them,
            # as a rate limit does, must not remove their indicators); one not readable is
            # refused and counted
            fetched = await fetch(urljoin(url, f"{uuid.lower()}.json"), None, None, budget,
                                  left)
        except FetchError as error:
            raise FeedError(f"event {uuid.lower()}: {error}") from None
        budget -= len(fetched.data or b"")
        try:
            event = await asyncio.to_thread(json_document, fetched.data or b"{}")
            misp_event(version, event)
        except FeedError:
            version.refuse("event not readable")
        bounded(version)
    return version


async def fetch_feed(db: Database, feed: intel_db.Feed, config: IntelConfig,
                     actor: str) -> Taken:
    """The feed fetched from its URL and its new version taken; the previous one kept, and
    why recorded, when anything fails."""
    try:
        fetched = await fetch(feed.url, feed.etag, feed.last_modified,
                              config.feed_max_bytes, config.fetch_timeout_seconds)
        if fetched.data is None:
            await intel_db.record_attempt(db, feed.name, None, actor)
            return Taken(feed.name, "not modified")
        if feed.format == "misp":
            version = await _misp_feed(fetched.data, feed.url, config)
        else:
            version = await asyncio.to_thread(read, feed.format, fetched.data, feed.kind)
        return await _swap(db, feed, version, fetched.etag, fetched.last_modified, actor,
                           fetched=True)
    except (FetchError, FeedError) as error:
        return await _failed(db, feed, str(error), actor)
    except DatabaseUnavailable:
        raise  # the job's to retry; nothing of the feed's to record
    except Exception as error:  # anything else a hostile feed finds: this feed's failure only
        log.exception("intel feed %s failed", feed.name)
        return await _failed(db, feed, f"{type(error).__name__}: {error}"[:300], actor)


async def _failed(db: Database, feed: intel_db.Feed, message: str, actor: str) -> Taken:
    # Shown to operators in a terminal: a feed server's reason phrase may carry escapes.
    message = "".join(c if c.isprintable() else "?" for c in message)
    log.warning("intel feed %s: kept the previous version: %s", feed.name, message)
    await intel_db.record_attempt(db, feed.name, message, actor)
    return Taken(feed.name, "failed", error=message)


async def import_file(db: Database, feed: intel_db.Feed, data: bytes, actor: str) -> Taken:
    """A version from a file (hosts without internet): a MISP file is one event, or a list
    of events."""
    try:
        version = await asyncio.to_thread(read, feed.format, data, feed.kind)
        return await _swap(db, feed, version, None, None, actor, fetched=False)
    except FeedError as error:
        return await _failed(db, feed, str(error), actor)
    except DatabaseUnavailable:
        raise
    except Exception as error:  # whatever a hostile file finds, as for a fetched feed
        log.exception("intel import into %s failed", feed.name)
        return await _failed(db, feed, f"{type(error).__name__}: {error}"[:300], actor)
