"""MAC address normalisation: the one place that decides what a router identity looks like."""

import re

_FORMS = re.compile(
    r"""(?:
        (?P<colon>[0-9a-f]{2}(?::[0-9a-f]{2}){5})      # aa:bb:cc:dd:ee:ff
      | (?P<dash>[0-9a-f]{2}(?:-[0-9a-f]{2}){5})       # aa-bb-cc-dd-ee-ff
      | (?P<dot>[0-9a-f]{4}\.[0-9a-f]{4}\.[0-9a-f]{4})  # aabb.ccdd.eeff
      | (?P<bare>[0-9a-f]{12})                         # aabbccddeeff
    )""",
    re.VERBOSE | re.IGNORECASE,
)


class InvalidMac(ValueError):
    pass


def normalise_mac(value: str) -> str:
    """Return `value` as lower-case colon form, or raise InvalidMac."""
    text = value.strip()
    if not _FORMS.fullmatch(text):
        raise InvalidMac(f"not a MAC address: {value[:64]!r} (expected e.g. aa:bb:cc:dd:ee:ff)")
    digits = re.sub(r"[^0-9a-fA-F]", "", text).lower()
    return ":".join(digits[i:i + 2] for i in range(0, 12, 2))
