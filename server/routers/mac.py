"""MAC address normalisation: the one place that decides what a router identity looks like."""

import re

# The accepted forms, as a pattern the OpenAPI document repeats (so no inline flags); a
# router's MAC is a unicast address: its first octet even (the group bit clear), which
# leaves out broadcast (ff:ff:ff:ff:ff:ff) and multicast (01:00:5e:...).
_FIRST = r"[0-9a-fA-F][02468aceACE]"
MAC_PATTERN = (_FIRST + r"(?::[0-9a-fA-F]{2}){5}"                   # aa:bb:cc:dd:ee:ff
               r"|" + _FIRST + r"(?:-[0-9a-fA-F]{2}){5}"            # aa-bb-cc-dd-ee-ff
               r"|" + _FIRST + r"[0-9a-fA-F]{2}\.[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}"  # aabb.ccdd.eeff
               r"|" + _FIRST + r"[0-9a-fA-F]{10}")                  # aabbccddeeff
_FORMS = re.compile(MAC_PATTERN)
_GROUP_FORMS = re.compile(MAC_PATTERN.replace(_FIRST, "[0-9a-fA-F]{2}"))
_CANONICAL = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
_SEPARATORS = re.compile(r"[^0-9a-fA-F]")


class InvalidMac(ValueError):
    pass


def normalise_mac(value: str) -> str:
    """Return `value` as lower-case colon form, or raise InvalidMac (a unicast address
    only)."""
    if _CANONICAL.fullmatch(value) and value[1] in "02468ace":
        return value  # already in the stored form: what agents send on every call
    text = value.strip()
    if not _FORMS.fullmatch(text):
        if _GROUP_FORMS.fullmatch(text):
            raise InvalidMac(f"{value[:64]!r} is a multicast or broadcast address: a router's "
                             "MAC is a unicast one (its first octet even)")
        raise InvalidMac(f"not a MAC address: {value[:64]!r} (expected e.g. aa:bb:cc:dd:ee:ff)")
    digits = _SEPARATORS.sub("", text).lower()
    return ":".join(digits[i:i + 2] for i in range(0, 12, 2))
