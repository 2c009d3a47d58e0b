"""Rule selectors, in suricata-update's style, for operators' rule overrides.

    2010935                  one sid (gid 1)
    1:2010935                gid:sid
    re:ET SCAN .* Sqlmap     a regular expression searched in the rule's text
    group:emerging-scan.rules  every rule of one file of the ruleset
    classtype:attempted-recon  every rule of one classtype

Each selector has the same two methods as suricata-update's matchers: `parse` (a class method
that refuses a malformed selector with ValueError) and `matches(rule)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_SELECTOR = 500


@dataclass(frozen=True)
class Selector:
    text: str
    kind: str            # sid, re, group, classtype
    gid: int = 1
    sid: int = 0
    pattern: re.Pattern | None = None
    value: str = ""

    @classmethod
    def parse(cls, text: str) -> "Selector":
        text = text.strip()
        if not text or len(text) > MAX_SELECTOR:
            raise ValueError(f"a selector has 1 to {MAX_SELECTOR} characters")
        if re.fullmatch(r"\d{1,18}", text):
            return cls(text, "sid", sid=int(text))
        if match := re.fullmatch(r"(\d{1,9}):(\d{1,18})", text):
            return cls(text, "sid", gid=int(match.group(1)), sid=int(match.group(2)))
        prefix, _, rest = text.partition(":")
        if prefix == "re" and rest:
            try:
                return cls(text, "re", pattern=re.compile(rest))
            except re.error as error:
                raise ValueError(f"not a regular expression: {rest!r} ({error})") from None
        if prefix in ("group", "classtype") and rest:
            return cls(text, prefix, value=rest)
        raise ValueError(f"not a selector: {text!r} (expected SID, GID:SID, re:REGEX, "
                         "group:FILE or classtype:NAME)")

    def matches(self, rule: dict) -> bool:
        if self.kind == "sid":
            return rule["sid"] == self.sid and rule["gid"] == self.gid
        if self.kind == "re":
            return self.pattern.search(rule["raw"]) is not None
        if self.kind == "group":
            return rule["file"].rsplit("/", 1)[-1] == self.value
        return rule["classtype"] == self.value


def matching(rules: list[dict], selector: Selector) -> list[int]:
    """Indices of the rules the selector matches (a sid selector is a set lookup)."""
    return [index for index, rule in enumerate(rules) if selector.matches(rule)]
