"""What the agent needs of a shared document's deltas (`?delta=2`, docs/router-api.md): a
delta follows the version held only when it starts at its ETag and, both being known, at
its number (a gap: the whole document is asked instead); the number of the version an
answer holds; what its removals name, as places among what is held (`removed_at`); the
fleet's list a delta leads to (agent/intel.py applies the intelligence's)."""

from __future__ import annotations


def follows(delta: dict, done: dict) -> bool:
    """Whether a delta starts at what this router holds: its ETag, the content's. A
    `from_serial` other than the number held, under that ETag, is the same content numbered
    again (a list back to an earlier state: the service starts from the latest number it
    had): it applies all the same."""
    return delta["delta_from"] == done.get("etag", "").removeprefix("W/").strip('"')


def serial_of(answer, body: dict) -> int | None:
    """The number of the version an answer holds: a delta's, or the header's."""
    if "serial" in body:
        return body["serial"]
    header = answer.headers.get("document-serial", "")
    return int(header) if header.isdigit() else None


def removed_at(held: list[str], places: list) -> set[str]:
    """The items of `held` (distinct) a delta's `remove_at` names: places among them in
    code-point order, each its distance from the one before (the first from -1).
    ValueError when they name what is not held (the whole document is asked then)."""
    order = sorted(held)
    if len(set(order)) != len(order):
        raise ValueError("the items held are not distinct: no place names one")
    named, place = set(), -1
    for distance in places:
        if type(distance) is not int or distance < 1:
            raise ValueError(f"not a distance between places: {str(distance)[:40]!r}")
        place += distance
        if place >= len(order):
            raise ValueError(f"place {place} of {len(order)} items held")
        named.add(order[place])
    return named


def removals(held: list[str], change: dict) -> set[str]:
    """What a delta's change removes of `held`: named (`remove`) or by place (`remove_at`)."""
    if "remove_at" in change:
        return removed_at(held, change["remove_at"])
    return set(change["remove"])


def fleet_applied(document: dict, delta: dict) -> dict:
    """The fleet's list a delta leads to from `document` (removed first: an entry whose
    expiry moved is removed and added again)."""
    gone = removals([entry["address"] for entry in document["entries"]], delta)
    entries = [entry for entry in document["entries"] if entry["address"] not in gone]
    return {"entry_count": delta["entry_count"], "entries": entries + delta["add"]}
