"""What a send request's fields may hold. Their values end up in email headers (the title has
the version number or project id in it; the recipient is the To header) and in the stored
record, so anything that could break a header or address someone else is refused here.

- Text: 1 to MAX_FIELD characters, no control, format or unassigned characters (Unicode
  categories C*), no line or paragraph separators (U+2028, U+2029), and no `=?`: the email
  package decodes an RFC 2047 encoded word in a header value it is given, so
  `=?utf-8?q?1=0D=0ABcc:...?=` would become a line break and a header of the caller's
  (CVE-2024-6923 on Python before 3.11.10).
- Recipient: exactly one plain address `local@domain`, read by the standard library's RFC 5322
  parser (so `a,b@x`, `"Bob" <bob@x>`, `b@x (comment)` and `<@route:b@x>` are refused, not
  half-understood), whose domain is a DNS name with a dot.
"""

from __future__ import annotations

import re
from email.errors import HeaderParseError
from email.headerregistry import HeaderRegistry

from server.refusal import Refusal
from server.text import is_plain_text

MAX_FIELD = 256
ENCODED_WORD = "=?"
MAX_ADDRESS = 254
_DOMAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                     r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+")
_HEADERS = HeaderRegistry()


class FieldError(Refusal):
    """The field's value is refused; the message names the field and says why."""


def text_field(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise FieldError(f"{name} is required and must be a non-empty string")
    if len(value) > MAX_FIELD or not is_plain_text(value):
        raise FieldError(f"{name} must be at most {MAX_FIELD} characters, without control "
                         "characters or line separators")
    if ENCODED_WORD in value:
        raise FieldError(f"{name} must not contain {ENCODED_WORD!r} (an encoded-word opener)")
    return value.strip()


def recipient_field(value: object) -> str:
    """The one plain address, exactly as given; FieldError for anything else."""
    address = text_field("recipient", value)
    if len(address) > MAX_ADDRESS or not _single_plain_address(address):
        raise FieldError("recipient must be one email address (local@domain), without a "
                         "display name, list or comment")
    return address


def _single_plain_address(text: str) -> bool:
    try:
        header = _HEADERS("To", text)
    except (HeaderParseError, IndexError, ValueError):
        return False
    if header.defects or len(header.groups) != 1 or header.groups[0].display_name is not None:
        return False
    addresses = header.groups[0].addresses
    if len(addresses) != 1:
        return False
    address = addresses[0]
    return (address.display_name == "" and address.addr_spec == text
            and bool(address.username) and bool(_DOMAIN.fullmatch(address.domain)))
