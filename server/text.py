"""What counts as plain text: a string that is safe in an email header or on an operator's
terminal. Control, format and unassigned characters (Unicode categories C*) and line and
paragraph separators (U+2028, U+2029) are not."""

from __future__ import annotations

import functools
import unicodedata

MAX_CODE_POINT = 0x10FFFF


def is_plain_text(value: str) -> bool:
    if value.isprintable():  # the common case; isprintable is False for C*, Zl, Zp and Zs
        return True          # other than the space, so what it refuses is checked below
    return not any(unicodedata.category(character)[0] == "C"
                   or unicodedata.category(character) in ("Zl", "Zp") for character in value)


@functools.cache
def plain_text_pattern() -> str:
    """A regular expression that matches exactly the plain texts (as the API document states
    them; tests/test_text.py compares it with `is_plain_text` on every code point). Built
    from this Python's Unicode data, in about half a second: call it off the event loop.
    Code points above U+FFFF are written as themselves, which Python, Rust and ECMA-262
    (with the `u` flag) regular expressions all read the same way."""
    refused = "".join(_one(start) if start == end else f"{_one(start)}-{_one(end)}"
                      for start, end in _refused_ranges())
    return f"^[^{refused}]*$"


def _refused_ranges() -> list[tuple[int, int]]:
    ranges, start = [], None
    for code in range(MAX_CODE_POINT + 2):
        refused = code <= MAX_CODE_POINT and not is_plain_text(chr(code))
        if refused and start is None:
            start = code
        elif not refused and start is not None:
            ranges.append((start, code - 1))
            start = None
    return ranges


def _one(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)


def one_line(text: str, width: int = 160) -> str:
    """`text` on one line of at most `width` characters: its first non-empty line, cut
    with an ellipsis (an error of five lines broke `status`'s table)."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    more = first != text.strip()
    if len(first) > width or more:
        return first[:width - 1].rstrip() + "…"
    return first
