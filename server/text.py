"""What counts as plain text: a string that is safe in an email header or on an operator's
terminal. Control, format and unassigned characters (Unicode categories C*) and line and
paragraph separators (U+2028, U+2029) are not."""

from __future__ import annotations

import unicodedata


def is_plain_text(value: str) -> bool:
    if value.isprintable():  # the common case; isprintable is False for C*, Zl, Zp and Zs
        return True          # other than the space, so what it refuses is checked below
    return not any(unicodedata.category(character)[0] == "C"
                   or unicodedata.category(character) in ("Zl", "Zp") for character in value)
