"""One threat feed's value as people write it (an operator's command, an owner's mark through
the frontend's API) read into its kind and stored form."""

from __future__ import annotations

from server.intel.formats import KINDS
from server.refusal import Refusal
from server.telemetry.indicators import IndicatorError, feed_value, parsed

MAX_WRITTEN = 300


class ValueInvalid(Refusal):
    """Not a value any threat feed may name."""


def written_value(text: str) -> tuple[str, str]:
    """`KIND:VALUE` (md5 and any network a feed may name included), or `KIND VALUE` or a bare
    address, domain or hash, as `hunt` takes it: (kind, stored form)."""
    if len(text) > MAX_WRITTEN:
        raise ValueInvalid(f"a value is at most {MAX_WRITTEN} characters")
    kind, sep, value = text.partition(":")
    if not (sep and kind in KINDS):  # (a hunt refuses networks a feed may name: a /3)
        try:
            wanted = parsed(text)
        except IndicatorError as error:
            raise ValueInvalid(f"{error} (KIND one of {', '.join(KINDS)})") from None
        kind, value = wanted.kind, wanted.value
    if kind not in KINDS:
        raise ValueInvalid(f"{text[:80]!r}: a {kind} is no threat feed's value (KIND one of "
                           f"{', '.join(KINDS)})")
    stored = feed_value(kind, value)
    if stored is None:
        raise ValueInvalid(f"{value[:80]!r} is not a {kind}")
    return kind, stored
