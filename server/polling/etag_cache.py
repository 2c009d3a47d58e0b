"""The current ETag of each payload this process served, kept in memory, so that a router
polling with an unchanged ETag (nearly every poll) is answered 304 without a query.

Kept true by PostgreSQL: the statements that write payloads (server/generation/rules_sql.py) notify
channel `router_rules` with the router's MAC, in their transaction, whenever its payload
content changes (migration 0021 replaced the trigger of 0006, which Citus cannot keep), and
the cache follows that channel on the process's change feed (server/changes.py), forgetting
that router. While the feed is not listening the cache is neither read nor filled (every
poll goes to the database, as without a cache), and it starts empty again once listening
resumes, so no change can be missed. The one window left is the moment between a commit and
the arrival of its notification, when a poll may still get 304; the router picks the change
up on its next poll.
"""

from __future__ import annotations

from server.changes import ChangeFeed
from server.db.channels import ROUTER_RULES

MAX_ROUTERS = 1_000_000          # about 150 bytes each; cleared whole when full


def etag_header(value: str) -> str:
    """The ETag header of a payload. Weak: the same content is served plain or
    gzip-encoded under one validator."""
    return f'W/"{value}"'


def wanted_etags(if_none_match: str | None) -> frozenset[str]:
    """The ETag values an If-None-Match names (weak or strong, quotes removed), `*`
    included; entries that are not quoted ETags are ignored, and so are those of other
    than ASCII (the service's ETags are ASCII; bytes that are not UTF-8 reach a header's
    value as surrogates, which no statement could take)."""
    wanted = set()
    for tag in (if_none_match or "").split(","):
        tag = tag.strip().removeprefix("W/")
        if tag == "*":
            wanted.add(tag)
        elif len(tag) >= 2 and tag[0] == tag[-1] == '"' and tag.isascii():
            wanted.add(tag[1:-1])
    return frozenset(wanted)


def not_modified(wanted: frozenset[str], current: str) -> bool:
    """Whether a poll naming `wanted` is answered 304 for the payload's `current` ETag: the
    one decision, the handler's."""
    return current in wanted or "*" in wanted


class EtagCache:
    def __init__(self, feed: ChangeFeed):
        self._feed = feed
        self._etags: dict[tuple[str, str], str] = {}
        self._changes = 0  # notifications seen (and listening starts and stops)
        feed.follow(ROUTER_RULES, self.forget, self._reset)

    @property
    def listening(self) -> bool:
        return self._feed.listening

    def __len__(self) -> int:
        return len(self._etags)

    def etag(self, mac: str, kind: str) -> str | None:
        return self._etags.get((mac, kind)) if self.listening else None

    def token(self) -> int:
        """Take before reading a payload; give to remember() after."""
        return self._changes

    def remember(self, mac: str, kind: str, etag: str, token: int) -> None:
        """Keep an ETag read from the database, unless a change was notified since the read
        began (the value read may predate it)."""
        if not self.listening or token != self._changes:
            return
        if len(self._etags) >= MAX_ROUTERS:
            self._etags.clear()
        self._etags[(mac, kind)] = etag

    def forget(self, mac: str) -> None:
        self._changes += 1
        self._etags.pop((mac, "ids"), None)
        self._etags.pop((mac, "firewall"), None)

    def _reset(self) -> None:
        self._changes += 1
        self._etags.clear()
