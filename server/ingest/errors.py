"""Why ingestion refuses an upload, in its own words: nothing of a refused upload is stored.
The web layer alone turns each into an HTTP status and the JSON error (server/errors.py)."""

from __future__ import annotations

from server.refusal import Refusal


class UploadRefused(Refusal):
    """An upload refused; the message says why."""


class BodyUnreadable(UploadRefused):
    """The body cannot be read as sent: broken gzip or framing, ended early."""


class BodyTooLarge(UploadRefused):
    """The body (or what its gzip expands to) is past the limits."""


class BodyStalled(UploadRefused):
    """The body stopped arriving: the rest of it will not be read."""


class FormatUnsupported(UploadRefused):
    """A Content-Type or Content-Encoding ingestion does not take."""


class BatchKeyReused(UploadRefused):
    """An Idempotency-Key sent before with another body."""


class NothingStored(UploadRefused):
    """None of the upload's records could be stored (its first errors and a hint in
    `details`)."""


class UploadsBusy(UploadRefused):
    """The router, or its client address, has as many uploads in progress as it may."""
