"""What the agent needs of a shared document's deltas (`?delta=1`, docs/router-api.md): a
delta follows the version held only when it starts at its ETag and, both being known, at
its number (a gap: the whole document is asked instead); the number of the version an
answer holds; the fleet's list a delta leads to (agent/intel.py applies the intelligence's)."""

from __future__ import annotations


def follows(delta: dict, done: dict) -> bool:
    """Whether a delta starts at the version this router holds: its ETag, and its number
    when both are known."""
    if delta["delta_from"] != done.get("etag", "").removeprefix("W/").strip('"'):
        return False
    held, start = done.get("serial"), delta.get("from_serial")
    return held is None or start is None or held == start


def serial_of(answer, body: dict) -> int | None:
    """The number of the version an answer holds: a delta's, or the header's."""
    if "serial" in body:
        return body["serial"]
    header = answer.headers.get("document-serial", "")
    return int(header) if header.isdigit() else None


def fleet_applied(document: dict, delta: dict) -> dict:
    """The fleet's list a delta leads to from `document` (removed first: an entry whose
    expiry moved is removed and added again)."""
    removed = set(delta["remove"])
    entries = [entry for entry in document["entries"] if entry["address"] not in removed]
    return {"entry_count": delta["entry_count"], "entries": entries + delta["add"]}
