"""MAC address normalisation: the one place that decides what a router identity looks like."""

import re

# The accepted forms, as a pattern the OpenAPI document repeats (so no inline flags).
MAC_PATTERN = (r"[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}"              # aa:bb:cc:dd:ee:ff
               r"|[0-9a-fA-F]{2}(?:-[0-9a-fA-F]{2}){5}"             # aa-bb-cc-dd-ee-ff
               r"|[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}"   # aabb.ccdd.eeff
               r"|[0-9a-fA-F]{12}")                                 # aabbccddeeff
_FORMS = re.compile(MAC_PATTERN)
_CANONICAL = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
_SEPARATORS = re.compile(r"[^0-9a-fA-F]")


class InvalidMac(ValueError):
    pass


def normalise_mac(value: str) -> str:
    """Return `value` as lower-case colon form, or raise InvalidMac."""
    if _CANONICAL.fullmatch(value):
        return value  # already in the stored form: what agents send on every call
    text = value.strip()
    if not _FORMS.fullmatch(text):
        raise InvalidMac(f"not a MAC address: {value[:64]!r} (expected e.g. aa:bb:cc:dd:ee:ff)")
    digits = _SEPARATORS.sub("", text).lower()
    return ":".join(digits[i:i + 2] for i in range(0, 12, 2))
