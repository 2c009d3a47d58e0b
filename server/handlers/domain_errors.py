"""The capabilities' own errors as the API answers them: the one place a domain's refusal
becomes an HTTP status (the error middleware, server/errors.py, answers with the JSON
shape). A subclass is listed before its base."""

from __future__ import annotations

from server.errors import (BadRequest, DomainStatuses, PayloadTooLarge, RequestTimeout,
                           TooManyRequests, Unprocessable, UnsupportedMediaType)
from server.ingest import errors as ingest

DOMAIN_STATUSES: DomainStatuses = (
    (ingest.BodyStalled, RequestTimeout),            # 408, the connection closed after it
    (ingest.BodyTooLarge, PayloadTooLarge),          # 413
    (ingest.FormatUnsupported, UnsupportedMediaType),  # 415
    (ingest.BatchKeyReused, Unprocessable),          # 422
    (ingest.NothingStored, Unprocessable),           # 422, its errors and a hint beside
    (ingest.UploadsBusy, TooManyRequests),           # 429, with Retry-After
    (ingest.BodyUnreadable, BadRequest),             # 400
)
