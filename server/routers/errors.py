"""Why a router's request is refused, in the routers' own words (identity, keys, enrollment,
registration, applied reports). The web layer alone turns each into an HTTP status and the
JSON error (server/handlers/domain_errors.py)."""

from __future__ import annotations

from server.refusal import Refusal


class IdentityMissing(Refusal):
    """No X-ID header, or no router key where one is needed."""


class IdentityInvalid(Refusal):
    """An X-ID header that names no router (several, or not a MAC address)."""


class CredentialsWrong(Refusal):
    """A router key or an enrollment token that does not match."""


class NotAllowed(Refusal):
    """The router may not do this: not subscribed while registration is closed, enrollment
    off."""


class EnrollmentRefused(Refusal):
    """The router cannot enroll now (it holds a key an operator did not reset)."""


class RegistrationsBusy(Refusal):
    """Too many new routers from one address bucket at once."""


class ReportInvalid(Refusal):
    """An applied report that is not what the API describes."""


class ReportStalled(Refusal):
    """A report whose body stopped arriving."""


class ReportTooLarge(Refusal):
    """An applied report past its size."""
