"""What is hunted, one place: the kinds of indicator, the one form each value is stored and
asked in, and the values a record carries.

| kind     | from a record                                                        | stored as      |
|----------|----------------------------------------------------------------------|----------------|
| `ip`     | `src_ip`, `dest_ip` of every record type                             | canonical (engine/addresses.py) |
| `domain` | DNS query and answer names (and CNAME targets), TLS SNI, HTTP hostname | lower case, no trailing dot, labels reversed (`com.example.www`); a record posts the name and each of its parents (`com.example`, `com`), so that a search for a name, which finds every name under it, is one exact key of the index |
| `ja3`    | `tls.ja3.hash`, `tls.ja3s.hash`                                      | 32 hex digits, lower case |
| `ja4`    | `tls.ja4`                                                            | as written, lower case |
| `sid`    | `alert.signature_id`                                                 | decimal        |
| `sha256` | `fileinfo.sha256`                                                    | 64 hex digits, lower case |

A value a record carries that is not well formed for its kind is not indexed; one a user
asks for is refused (IndicatorError) with what is wrong. A user writes an indicator one way
everywhere (`parsed`): `KIND:VALUE`, `KIND VALUE`, or a bare address, network, SHA-256 or
domain name; a value that looks like an address and is not one is refused, never taken for
a name. A `network` (at most NETWORK_ADDRESSES_MAX addresses) is not stored: it is found by
each of its addresses (Indicator.postings).

Why a domain posts its parents rather than being found as a range of names under it: one
router can look up any number of names under a domain (`a1.c2.example`, `a2.c2.example` ...),
and a range holds a posting for each, so a hunt reading a bounded number of postings found
that router's and missed the others'. A parent posting is one per router and day whatever
the names under it, as every other kind's value is.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass

from engine.addresses import canonical_network, canonical_text, is_public, is_public_network
from engine.intel import shown

# Stored as one byte ("char") per posting.
CODES = {"ip": "i", "domain": "d", "ja3": "3", "ja4": "4", "sid": "s", "sha256": "h"}
KINDS = {code: kind for kind, code in CODES.items()}
KIND_NAMES = (*CODES, "network")  # what a user may name: a network is found by addresses

# fullmatch: `$` would also match before a final newline.
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_JA4 = re.compile(r"[a-z0-9]{10}_[0-9a-f]{12}_[0-9a-f]{12}")
_DECIMAL = re.compile(r"[0-9]{1,19}")
MAX_SID = 2**63 - 1
# A name posts itself and its parents up to this many labels from the root
# (`com.example.cdn.eu.a.b.c.d`): a search for a deeper name finds that name only.
PARENT_LABELS = 8
# A DNS record's names indexed (a response rarely holds more than a few); a record of
# thousands of names costs no more than this.
NAMES_PER_RECORD = 32


class IndicatorError(ValueError):
    """A value that is not an indicator of its kind; the message says why."""


@dataclass(frozen=True)
class Indicator:
    kind: str     # ip, domain, ja3, ja4, sid, sha256, network
    value: str    # as the user wrote it (normalised for display)
    stored: str   # as the index holds it (a network: as written canonically)

    @property
    def code(self) -> str:
        return CODES[self.kind]

    @property
    def in_households(self) -> bool:
        """An address or network that is not public: every home network has its own, so a
        hunt for it reads households' traffic, not a sighting of one host."""
        if self.kind == "ip":
            return not is_public(self.stored)
        return self.kind == "network" and not is_public_network(self.stored)

    def postings(self) -> list[tuple[str, str]]:
        """The index's (code, stored value) pairs it is found by: a network by each of its
        addresses."""
        if self.kind == "network":
            return [("i", canonical_text(str(address)))
                    for address in ipaddress.ip_network(self.stored)]
        return [(self.code, self.stored)]


def _domain(text: str) -> str | None:
    """A DNS name's stored form (labels reversed), None when it is not one."""
    if not text.isascii():  # before strip() and lower(), as in _stored
        return None
    name = text.strip().lower().rstrip(".")
    if not name or len(name) > 253:
        return None
    labels = name.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return None
    return ".".join(reversed(labels))


@functools.lru_cache(maxsize=65536)
def _domain_postings(text: str) -> tuple[str, ...]:
    """The stored values a name posts: itself and its parents (PARENT_LABELS at most)."""
    stored = _domain(text)
    if stored is None:
        return ()
    labels = stored.split(".")
    parents = [".".join(labels[:n]) for n in range(1, min(len(labels) - 1, PARENT_LABELS) + 1)]
    return (*parents, stored)


# Cached: a router's uploads carry the same few addresses and names over and over, and these
# run for each value of each record at ingestion.
@functools.lru_cache(maxsize=65536)
def _address(text: str) -> str | None:
    """An address's stored form (its canonical one), None when it is not an address."""
    try:
        return canonical_text(text)
    except ValueError:
        return None


@functools.lru_cache(maxsize=65536)
def _stored(kind: str, text: str) -> str | None:
    """`text` in its stored form for `kind`, or None when it is not one. ASCII only, checked
    first: strip() takes Unicode spaces (U+2028) and lower() maps some letters (the Kelvin
    sign) into ASCII."""
    if not text.isascii():
        return None
    if kind == "ip":
        return _address(text.strip())
    if kind == "domain":
        return _domain(text)
    lowered = text.strip().lower()
    if kind == "ja3":
        return lowered if _HEX32.fullmatch(lowered) else None
    if kind == "ja4":
        return lowered if _JA4.fullmatch(lowered) else None
    if kind == "sha256":
        return lowered if _HEX64.fullmatch(lowered) else None
    if kind == "sid":  # ASCII digits only: str.isdigit() also takes '²', which int() refuses
        return str(int(lowered)) if _DECIMAL.fullmatch(lowered) and \
            0 < int(lowered) <= MAX_SID else None
    raise IndicatorError(f"unknown kind {kind!r} (one of {', '.join(KIND_NAMES)})")


NETWORK_ADDRESSES_MAX = 65_536  # a network hunted is each of its addresses: a /16, a /112


def _network(text: str) -> Indicator:
    value = text.strip()
    try:
        if not value.isascii() or "/" not in value:
            raise ValueError
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise IndicatorError(f"{value[:80]!r} is not a network (ADDRESS/PREFIX)") from None
    if network.num_addresses > NETWORK_ADDRESSES_MAX:
        raise IndicatorError(f"{value[:80]!r} holds {network.num_addresses:,} addresses: a "
                             f"network of at most {NETWORK_ADDRESSES_MAX:,} (a /16, a /112) "
                             "is hunted, each address of it")
    return Indicator("network", str(network), str(network))


def indicator(kind: str, text: str) -> Indicator:
    """A user's indicator; IndicatorError naming what is wrong."""
    if kind == "network":
        return _network(text)
    if kind == "domain" and _looks_like_address(text.strip()):
        raise IndicatorError(f"{text.strip()[:80]!r} is an address, not a domain name: hunt "
                             "it as ip:VALUE (--ip)")
    stored = _stored(kind, text)
    if stored is None:
        if kind == "ip" and "/" in text:
            raise IndicatorError(f"{text.strip()[:80]!r} is a network: hunt it as "
                                 "network:VALUE (--network)")
        raise IndicatorError(f"{text[:80]!r} is not {_WHAT[kind]}")
    return Indicator(kind, shown(kind, stored), stored)


_IPV4_LIKE = re.compile(r"[0-9]+(\.[0-9]+){1,5}")
_IPV6_LIKE = re.compile(r"[0-9a-fA-F:.]*:[0-9a-fA-F:.]*")


def _looks_like_address(text: str) -> bool:
    """Digits and dots, or hex digits and colons: meant as an address, whether or not it is
    one (`10.0.0.300` is a typo, not a host name)."""
    return bool(_IPV4_LIKE.fullmatch(text) or _IPV6_LIKE.fullmatch(text))


_WHAT = {"network": "a network", "ip": "an IP address", "domain": "a domain name",
         "ja3": "a JA3 hash (32 hex digits)",
         "ja4": "a JA4 fingerprint (such as t13d1516h2_8daaf6152771_b186095e22b6)",
         "sid": "a signature id (a positive integer)", "sha256": "a SHA-256 (64 hex digits)"}


def guessed(text: str) -> Indicator:
    """A bare value whose kind is plain: an address, a 64-hex SHA-256, a domain name. A
    value that looks like an address and is not one is refused as an address, never hunted
    as a name."""
    value = text.strip()
    if "/" in value and _looks_like_address(value.split("/", 1)[0]):
        return _network(value)
    if _looks_like_address(value) and _stored("ip", value) is None:
        raise IndicatorError(f"{value[:80]!r} is not an IP address")
    for kind in ("ip", "sha256", "domain"):
        if _stored(kind, value) is not None and (kind != "domain" or "." in value):
            return indicator(kind, value)
    raise IndicatorError(f"{value[:80]!r}: give its kind (KIND:VALUE, KIND one of "
                         f"{', '.join(CODES)}); only an address, a SHA-256 or a domain name "
                         "is recognised alone")


def parsed(text: str) -> Indicator:
    """One indicator as written anywhere (the command's arguments, --file lines, the
    console, --match): `KIND:VALUE`, `KIND VALUE`, or a bare value whose kind is plain."""
    value = text.strip()
    kind, sep, rest = value.partition(":")
    if sep and kind.lower() in KIND_NAMES:
        return indicator(kind.lower(), rest)
    parts = value.split(None, 1)
    if len(parts) == 2 and parts[0].lower() in KIND_NAMES:
        return indicator(parts[0].lower(), parts[1])
    return guessed(value)


def feed_value(kind: str, text: str) -> str | None:
    """A threat feed's value in its stored form (server/intel/), None when it is not one of
    `kind`: the hunt's kinds as above, a network of any size (its canonical CIDR: delivered
    whole, hunted only when small) and `md5` (a file hash Suricata matches; the index keeps
    none)."""
    if kind == "md5":
        lowered = text.strip().lower()
        return lowered if text.isascii() and _HEX32.fullmatch(lowered) else None
    if kind == "network":
        value = text.strip()
        if not _NETWORK_TEXT.fullmatch(value):  # no IPv6 zone (`%1`): PostgreSQL refuses it
            return None
        try:
            return str(canonical_network(value))
        except ValueError:
            return None
    if kind == "domain" and _looks_like_address(text.strip()):
        return None
    stored = _stored(kind, text)
    if kind == "domain" and stored is not None and "." not in stored:
        return None  # one label (`org`): every household's browsing, not an indicator
    return stored


_NETWORK_TEXT = re.compile(r"[0-9a-fA-F:.]+/[0-9]{1,3}")


def from_line(line: str) -> Indicator | None:
    """One line of an indicator file: an indicator (parsed); None for a blank line or a
    comment (#)."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    return parsed(text)


def _names(dns: dict) -> list:
    """The names of a DNS record, in every EVE layout Suricata writes (v1: one rrname per
    record; v2 and v3: queries and answers lists; grouped CNAME answers)."""
    names = [dns.get("rrname")]
    for section in ("queries", "answers", "authorities"):
        entries = dns.get(section)
        if isinstance(entries, list):
            for entry in entries:
                if isinstance(entry, dict):
                    names.append(entry.get("rrname"))
                    if entry.get("rrtype") == "CNAME":
                        names.append(entry.get("rdata"))
    if dns.get("rrtype") == "CNAME":
        names.append(dns.get("rdata"))
    grouped = dns.get("grouped")
    if isinstance(grouped, dict) and isinstance(grouped.get("CNAME"), list):
        names.extend(grouped["CNAME"])
    return names[:NAMES_PER_RECORD]


def _text_values(kind: str, values) -> list[tuple[str, str]]:
    code = CODES[kind]
    found = []
    for value in values:
        if value.__class__ is str and len(value) <= 300:
            if kind == "domain":
                found += [(code, stored) for stored in _domain_postings(value)]
            elif (stored := _stored(kind, value)) is not None:
                found.append((code, stored))
    return found


def carried(record: dict) -> list[tuple[str, str]]:
    """The (code, stored value) pairs `record` carries, repeats included. Written out for
    speed: it runs for every record at ingestion, where most records are flows and alerts
    that carry only addresses and a signature."""
    get = record.get
    found = []
    for field in ("src_ip", "dest_ip"):
        value = get(field)
        if value.__class__ is str and (stored := _address(value)) is not None:
            found.append(("i", stored))
    alert = get("alert")
    if alert.__class__ is dict:
        sid = alert.get("signature_id")
        if sid.__class__ is int and 0 < sid <= MAX_SID:
            found.append(("s", str(sid)))
    dns, tls, http, fileinfo = get("dns"), get("tls"), get("http"), get("fileinfo")
    if dns.__class__ is dict:
        found += _text_values("domain", _names(dns))
    if tls.__class__ is dict:
        found += _text_values("domain", (tls.get("sni"),))
        for field in ("ja3", "ja3s"):
            if tls.get(field).__class__ is dict:
                found += _text_values("ja3", (tls[field].get("hash"),))
        found += _text_values("ja4", (tls.get("ja4"),))
    if http.__class__ is dict:
        found += _text_values("domain", (http.get("hostname"),))
    if fileinfo.__class__ is dict:
        found += _text_values("sha256", (fileinfo.get("sha256"),))
    return found


def carries(record: dict, wanted: Indicator) -> bool:
    """Whether `record` carries the indicator as the index has it (for a domain: it or a
    name under it, as its parent postings say; for a network: an address in it), so a
    drill-down shows what a hunt found."""
    found = carried(record)
    if wanted.kind == "network":
        network = ipaddress.ip_network(wanted.stored)
        return any(code == "i" and ipaddress.ip_address(value) in network
                   for code, value in found)
    return (wanted.code, wanted.stored) in found


def match_argument(text: str) -> Indicator:
    """The drill-down's indicator (--match, the console's ?match=): written as everywhere
    else (parsed); IndicatorError naming what is wrong."""
    return parsed(text)
