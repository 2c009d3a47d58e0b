"""Plain text (server/text.py): what the notification fields may hold, and the regular
expression the API document states for it, which must say exactly the same."""

from __future__ import annotations

import re

import pytest

from server.text import MAX_CODE_POINT, is_plain_text, plain_text_pattern


@pytest.mark.parametrize("value, plain", [
    ("p42", True), ("Zürich 東京 🙂", True), ("a b", True), ("", True),
    ("a\nb", False), ("a\x7fb", False), ("\u0085", False), ("a\u2028b", False),
    ("a\u2029b", False), ("\u200e", False), ("\ufeff", False), ("\ue000", False),
    ("\U000e0001", False), ("\U0010ffff", False), ("\u0378", False)])
def test_plain_text(value, plain):
    assert is_plain_text(value) is plain


def test_the_documented_pattern_accepts_exactly_the_plain_code_points():
    pattern = re.compile(plain_text_pattern())
    differ = [hex(code) for code in range(MAX_CODE_POINT + 1)
              if (pattern.fullmatch(chr(code)) is not None) != is_plain_text(chr(code))]
    assert not differ, differ[:20]
    assert pattern.fullmatch("Zürich 東京 🙂") and not pattern.fullmatch("ok\U000e0001")
