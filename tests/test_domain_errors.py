"""A capability's own errors are answered by the web layer's one table
(server/handlers/domain_errors.py): every one ingestion and the routers raise has its status, keeps its
message, Retry-After and details, and neither ingestion nor the routers import the HTTP
errors."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from server.errors import api_error
from server.idempotency_key import KeyInvalid
from server.notify.fields import FieldError
from server.notify.sends import KeyInProgress, KeyReused
from server.handlers.domain_errors import DOMAIN_STATUSES
from server.ingest import errors as ingest
from server.refusal import Refusal
from server.routers import errors as routers

ROOT = Path(__file__).resolve().parents[1]


def test_every_ingestion_refusal_has_its_status():
    refusals = [cls for _, cls in inspect.getmembers(ingest, inspect.isclass)
                if issubclass(cls, ingest.UploadRefused) and cls is not ingest.UploadRefused]
    assert len(refusals) == 7
    for refusal in refusals:
        answered = api_error(refusal("why", 3, {"hint": "h"}), DOMAIN_STATUSES)
        assert answered is not None, refusal
        assert 400 <= answered.status < 500 and answered.message == "why"
        assert answered.headers == {"Retry-After": "3"} and answered.details == {"hint": "h"}
    statuses = {cls.__name__: api_error(cls("x"), DOMAIN_STATUSES).status for cls in refusals}
    assert statuses == {"BodyStalled": 408, "BodyTooLarge": 413, "FormatUnsupported": 415,
                        "BatchKeyReused": 422, "NothingStored": 422, "UploadsBusy": 429,
                        "BodyUnreadable": 400}
    assert api_error(ValueError("x"), DOMAIN_STATUSES) is None  # anything else: a 500


def test_every_routers_refusal_has_its_status():
    refusals = [cls for _, cls in inspect.getmembers(routers, inspect.isclass)
                if issubclass(cls, Refusal) and cls is not Refusal]
    statuses = {cls.__name__: api_error(cls("x"), DOMAIN_STATUSES).status for cls in refusals}
    assert statuses == {"IdentityInvalid": 400, "IdentityMissing": 401, "CredentialsWrong": 401,
                        "NotAllowed": 403, "EnrollmentRefused": 409, "RegistrationsBusy": 429,
                        "ReportInvalid": 400, "ReportTooLarge": 413,
                        "ReportStalled": 408}


def test_no_capability_raises_an_http_error_of_its_own():
    """Only the web faces (server/handlers, server/web, server/console, the app's assembly)
    know HTTP statuses."""
    faces = ("handlers", "web", "console")
    for path in (ROOT / "server").rglob("*.py"):
        relative = path.relative_to(ROOT / "server")
        if relative.parts[0] in faces or relative.as_posix() in ("errors.py", "app.py"):
            continue
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        assert "server.errors" not in imported, path


def test_the_notification_apis_refusals_are_answered_by_the_table():
    statuses = {cls.__name__: api_error(cls("x"), DOMAIN_STATUSES).status
                for cls in (KeyInvalid, FieldError, KeyReused, KeyInProgress)}
    assert statuses == {"KeyInvalid": 400, "FieldError": 400, "KeyReused": 422,
                        "KeyInProgress": 409}
