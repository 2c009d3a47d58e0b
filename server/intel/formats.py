"""Threat feeds read into indicators: one function per format, each taking the feed's bytes
and giving a `Version`, the indicators it names (in the hunt's stored forms,
server/telemetry/indicators.py feed_value) and the lines it refused, counted by reason.

| format     | what it is                                                    | taken                          |
|------------|---------------------------------------------------------------|--------------------------------|
| `plain`    | one value a line, `#` comments                                | the feed's kind, else inferred |
| `threatfox`| abuse.ch ThreatFox JSON export (`{id: [ioc]}`) or API answer (`{"data": [...]}`) | ip:port, domain, url (its host), md5_hash, sha256_hash; `confidence_level`, `first_seen_utc`, `last_seen_utc` |
| `urlhaus`  | abuse.ch URLhaus CSV (`id,dateadded,url,...`)                  | each URL's host (domain or ip) |
| `drop`     | Spamhaus DROP/EDROP NDJSON (`{"cidr": ...}` lines and one metadata line) | networks |
| `misp`     | a MISP event's JSON (`{"Event": {...}}`, with its Objects)      | attributes flagged `to_ids`: ip-src, ip-dst (and `|port`), domain, hostname, url, md5, sha256, ja3-fingerprint-md5, domain|ip |

STIX 2.1 patterns are not taken (no format above carries them as indicators we keep).
A value that is not of its kind, or a line no format can read, is refused and counted;
nothing of a refused line is kept, so a quote or a newline never reaches a rules file.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urlsplit

import orjson

from server.telemetry.indicators import feed_value

FORMATS = ("plain", "threatfox", "urlhaus", "drop", "misp")
KINDS = ("ip", "network", "domain", "ja3", "ja4", "sha256", "md5")
MAX_LINES = 2_000_000      # a version with more is refused whole
MAX_INDICATORS = 1_000_000  # likewise
MAX_LINE_BYTES = 4_096     # a longer line is refused (a URL of a few KiB at most)


class FeedError(ValueError):
    """A version that cannot be taken at all; the message says why in one line."""


@dataclass
class Entry:
    kind: str
    value: str                       # stored form
    confidence: int | None = None    # the feed's, 0-100; None: the feed's default
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    expires_at: datetime | None = None


@dataclass
class Version:
    entries: dict[tuple[str, str], Entry] = field(default_factory=dict)
    lines: int = 0
    refusals: Counter = field(default_factory=Counter)
    malformed: int = 0

    @property
    def refused(self) -> int:
        return sum(self.refusals.values())

    def add(self, kind: str, text: str, **known) -> None:
        value = feed_value(kind, text) if len(text) <= MAX_LINE_BYTES else None
        if value is None:
            self.refuse(f"not {kind}")
            return
        entry = self.entries.get((kind, value))
        if entry is None:
            self.entries[(kind, value)] = Entry(kind, value, **known)
            return
        for name, moment in known.items():  # a value named twice: its widest span
            if moment is None or name == "confidence":
                continue
            current = getattr(entry, name)
            keep = min if name == "first_seen" else max
            setattr(entry, name, moment if current is None else keep(current, moment))
        if known.get("confidence") is not None:
            entry.confidence = max(entry.confidence or 0, known["confidence"])

    def refuse(self, reason: str, malformed: bool = True) -> None:
        """A line or object not taken: `malformed` when it is not of the format at all (a
        feed mostly of those is not one: server/intel/feeds.py), else one the format
        writes that is not for us (a MISP attribute not `to_ids`, a type not taken)."""
        self.refusals[reason] += 1
        self.malformed += malformed


_HEX32 = re.compile(r"[0-9a-fA-F]{32}")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_JA4 = re.compile(r"[a-z0-9]{10}_[0-9a-f]{12}_[0-9a-f]{12}")
_IPV4ISH = re.compile(r"[0-9.]+|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*")


def inferred_kind(text: str) -> str:
    """A plain line's kind: a CIDR is a network, an address an ip, a URL its host's, 64 hex
    digits a sha256, 32 an md5 (a JA3 feed names its kind), a JA4 as such, else a domain."""
    if "://" in text:
        return "url"
    head = text.split("/", 1)[0]
    if _IPV4ISH.fullmatch(head):
        return "network" if "/" in text else "ip"
    if _HEX64.fullmatch(text):
        return "sha256"
    if _HEX32.fullmatch(text):
        return "md5"
    if _JA4.fullmatch(text.lower()):
        return "ja4"
    return "domain"


def _lines(data: bytes) -> list[str]:
    """The lines (ended by LF or CRLF), counted before any is made: 22 million short lines
    once took 1.8 GB before they were refused."""
    count = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    if count > MAX_LINES:
        raise FeedError(f"the feed has {count:,} lines, more than {MAX_LINES:,}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FeedError("the feed is not UTF-8 text") from None
    return [line.removesuffix("\r") for line in text.split("\n")]


def _add_url(version: Version, url: str, **known) -> None:
    """A URL's host: a domain, or an address (an IPv6 one in brackets)."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        host = None
    if not host:
        version.refuse("not a URL")
        return
    version.add("ip" if _IPV4ISH.fullmatch(host) else "domain", host, **known)


def _add(version: Version, kind: str, text: str, **known) -> None:
    if kind == "url":
        _add_url(version, text, **known)
    else:
        version.add(kind, text, **known)


def plain(data: bytes, kind: str | None = None) -> Version:
    version = Version()
    for line in _lines(data):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        version.lines += 1
        _add(version, kind or inferred_kind(text), text)
    return version


def _utc(text) -> datetime | None:
    """`2024-05-01 12:00:00` (abuse.ch, UTC) or ISO 8601; None when absent or unreadable
    (a time in the future is the reader's to clamp: server/intel/feeds.py rows)."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace(" UTC", ""))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def json_document(data: bytes):
    """The document, its objects and arrays counted before it is parsed: 64 MiB of `{},`
    once took 2.1 GB before they were refused."""
    if (count := data.count(b"{") + data.count(b"[")) > MAX_LINES:
        raise FeedError(f"the feed has {count:,} objects and arrays, more than {MAX_LINES:,}")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise FeedError(f"the feed is not JSON: {error}") from None


_THREATFOX_KINDS = {"ip:port": "ip", "domain": "domain", "url": "url", "md5_hash": "md5",
                    "sha256_hash": "sha256"}


def threatfox(data: bytes, kind: str | None = None) -> Version:
    document = json_document(data)
    if isinstance(document, dict) and isinstance(document.get("data"), list):
        iocs = document["data"]
    elif isinstance(document, dict):
        iocs = [ioc for listed in document.values() if isinstance(listed, list)
                for ioc in listed]
    else:
        raise FeedError("not a ThreatFox export (an object of IOC lists, or {\"data\": [...]})")
    version = Version()
    for ioc in iocs:
        version.lines += 1
        if not isinstance(ioc, dict):
            version.refuse("not an IOC object")
            continue
        ioc_type = ioc.get("ioc_type")
        ioc_kind = _THREATFOX_KINDS.get(ioc_type) if isinstance(ioc_type, str) else None
        value = ioc.get("ioc_value", ioc.get("ioc"))
        if ioc_kind is None or not isinstance(value, str):
            version.refuse(f"ioc_type {str(ioc.get('ioc_type'))[:40]!r} not taken",
                           malformed=False)
            continue
        if ioc_kind == "ip":
            value = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
        confidence = ioc.get("confidence_level")
        _add(version, ioc_kind, value,
             confidence=confidence if isinstance(confidence, int)
             and not isinstance(confidence, bool) and 0 <= confidence <= 100 else None,
             first_seen=_utc(ioc.get("first_seen_utc", ioc.get("first_seen"))),
             last_seen=_utc(ioc.get("last_seen_utc", ioc.get("last_seen"))))
    return version


def urlhaus(data: bytes, kind: str | None = None) -> Version:
    version = Version()
    rows = csv.reader(io.StringIO("\n".join(
        line for line in _lines(data) if line.strip() and not line.startswith("#"))))
    try:
        for row in rows:
            version.lines += 1
            if len(row) < 3:
                version.refuse("not a URLhaus row")
                continue
            added = _utc(row[1])
            _add_url(version, row[2], first_seen=added)
    except csv.Error as error:
        raise FeedError(f"the feed is not CSV: {error}") from None
    return version


def drop(data: bytes, kind: str | None = None) -> Version:
    version = Version()
    for line in _lines(data):
        if not line.strip():
            continue
        version.lines += 1
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            version.refuse("not JSON")
            continue
        if isinstance(item, dict) and item.get("type") == "metadata":
            version.lines -= 1
            continue
        cidr = item.get("cidr") if isinstance(item, dict) else None
        if not isinstance(cidr, str):
            version.refuse("no cidr")
            continue
        version.add("network", cidr)
    return version


_MISP_KINDS = {"ip-src": "ip", "ip-dst": "ip", "ip-src|port": "ip|port", "ip-dst|port": "ip|port",
               "domain": "domain", "hostname": "domain", "url": "url", "md5": "md5",
               "sha256": "sha256", "ja3-fingerprint-md5": "ja3", "domain|ip": "domain|ip"}


def _listed(value) -> list:
    return value if isinstance(value, list) else []


def _misp_attributes(event: dict):
    yield from _listed(event.get("Attribute"))
    for misp_object in _listed(event.get("Object")):
        if isinstance(misp_object, dict):
            yield from _listed(misp_object.get("Attribute"))


def _misp_moment(attribute: dict) -> datetime | None:
    stamp = attribute.get("timestamp")
    try:
        return datetime.fromtimestamp(int(stamp), timezone.utc) if stamp is not None else None
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def misp_event(version: Version, document) -> None:
    """One MISP event's attributes meant for detection (`to_ids`) into `version`."""
    event = document.get("Event") if isinstance(document, dict) else None
    if not isinstance(event, dict):
        raise FeedError("not a MISP event ({\"Event\": {...}})")
    for attribute in _misp_attributes(event):
        version.lines += 1
        if not isinstance(attribute, dict) or not attribute.get("to_ids"):
            version.refuse("not to_ids", malformed=False)
            continue
        misp_type = attribute.get("type")
        kind = _MISP_KINDS.get(misp_type) if isinstance(misp_type, str) else None
        value = attribute.get("value")
        if kind is None or not isinstance(value, str):
            version.refuse(f"type {str(attribute.get('type'))[:40]!r} not taken",
                           malformed=False)
            continue
        moment = _misp_moment(attribute)
        parts = value.split("|") if "|" in kind else [value]
        kinds = kind.split("|")
        if kind.endswith("|port"):
            parts, kinds = parts[:1], ["ip"]
        for part_kind, part in zip(kinds, parts):
            _add(version, part_kind, part, first_seen=moment, last_seen=moment)


def misp(data: bytes, kind: str | None = None) -> Version:
    document = json_document(data)
    version = Version()
    for event in document if isinstance(document, list) else [document]:
        misp_event(version, event)
    return version


READERS = {"plain": plain, "threatfox": threatfox, "urlhaus": urlhaus, "drop": drop,
           "misp": misp}


def read(format_: str, data: bytes, kind: str | None = None) -> Version:
    """A feed's version in `format_`; FeedError when the whole of it cannot be taken."""
    return bounded(READERS[format_](data, kind))


def bounded(version: Version) -> Version:
    if version.lines > MAX_LINES:
        raise FeedError(f"the feed has {version.lines:,} entries, more than {MAX_LINES:,}")
    if len(version.entries) > MAX_INDICATORS:
        raise FeedError(f"the feed gives {len(version.entries):,} indicators, more than "
                        f"{MAX_INDICATORS:,}")
    return version
