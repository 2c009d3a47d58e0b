"""The capabilities' own errors as the API answers them: the one place a domain's refusal
becomes an HTTP status (the error middleware, server/errors.py, answers with the JSON
shape). A subclass is listed before its base."""

from __future__ import annotations

from server.errors import (BadRequest, Conflict, DomainStatuses, Forbidden, NotFound,
                           PayloadTooLarge, RequestTimeout, TooManyRequests, Unauthorized,
                           Unprocessable, UnsupportedMediaType)
from server.idempotency_key import KeyInvalid
from server.ingest import errors as ingest
from server.enforcement.report import EnforcementInvalid
from server.feedback import marks
from server.polling.capacity import CapacityInvalid
from server.intel.values import ValueInvalid
from server.reports.schedule import ScheduleInvalid
from server.notify.fields import FieldError
from server.notify.sends import KeyInProgress, KeyReused
from server.routers import errors as routers

DOMAIN_STATUSES: DomainStatuses = (
    (ingest.BodyStalled, RequestTimeout),            # 408, the connection closed after it
    (ingest.BodyTooLarge, PayloadTooLarge),          # 413
    (ingest.FormatUnsupported, UnsupportedMediaType),  # 415
    (ingest.BatchKeyReused, Unprocessable),          # 422
    (ingest.NothingStored, Unprocessable),           # 422, its errors and a hint beside
    (ingest.UploadsBusy, TooManyRequests),           # 429, with Retry-After
    (ingest.BodyUnreadable, BadRequest),             # 400
    (routers.IdentityInvalid, BadRequest),           # 400
    (routers.IdentityMissing, Unauthorized),         # 401
    (routers.CredentialsWrong, Unauthorized),        # 401
    (routers.NotAllowed, Forbidden),                 # 403
    (routers.EnrollmentRefused, Conflict),           # 409
    (routers.RegistrationsBusy, TooManyRequests),    # 429, with Retry-After
    (routers.ReportInvalid, BadRequest),             # 400
    (routers.ReportTooLarge, PayloadTooLarge),       # 413
    (routers.ReportStalled, RequestTimeout),         # 408
    (EnforcementInvalid, BadRequest),                # 400
    (KeyInvalid, BadRequest),                        # 400
    (CapacityInvalid, BadRequest),                   # 400
    (FieldError, BadRequest),                        # 400, naming the field
    (KeyReused, Unprocessable),                      # 422
    (KeyInProgress, Conflict),                       # 409, with Retry-After
    (marks.NotYours, NotFound),                      # 404, whether another's or none
    (marks.MarkNotFound, NotFound),                  # 404
    (marks.MarkInvalid, BadRequest),                 # 400
    (marks.MarksExhausted, TooManyRequests),         # 429, with Retry-After
    (ScheduleInvalid, BadRequest),                   # 400
    (ValueInvalid, BadRequest),                      # 400
)
