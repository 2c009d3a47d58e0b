"""The OpenAPI 3 document of every HTTP endpoint, served at GET /openapi.json.

Built from the same constants the handlers use (the MAC forms, the notification types, the
paging bounds), and kept true by tests/test_openapi.py, which compares it with the app's
routes and runs schemathesis against the served document.
"""

from __future__ import annotations

import functools

from engine.generate import RULE_SOURCES
from server import SERVICE_VERSION
from server.routers.mac import MAC_PATTERN
from server.enforcement.report import IDS, MAX_COUNT, MAX_ENTRIES
from server.routers.applied import ETAG_PATTERN, MAX_ETAG
from server.notify.fields import MAX_FIELD
from server.notify.texts import TYPES
from server.text import plain_text_pattern

EXAMPLE_MAC = "aa:bb:cc:dd:ee:ff"


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


# server/idempotency_key.py (the quoted form is left out here).
IDEMPOTENCY_KEY = {"type": "string", "minLength": 1, "maxLength": 255,
                   "pattern": "^[\\x20-\\x7e]+$"}


def _json(schema: dict, description: str, headers: dict | None = None) -> dict:
    response = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def _error(description: str, retry: bool = False) -> dict:
    headers = {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}} if retry else None
    return _json(_ref("Error"), description, headers)


def _router_errors(*statuses: int) -> dict:
    descriptions = {
        400: "malformed input (X-ID not a MAC address or sent more than once, bad body)",
        401: "X-ID header missing; with ROUTER_AUTH=key also a missing or invalid router key",
        403: "router not subscribed (REGISTRATION_MODE=closed)",
        404: "nothing there yet",
        408: "the body stopped arriving for INGEST_BODY_IDLE_SECONDS; nothing stored, "
             "connection closed",
        413: "body larger than INGEST_MAX_BODY_BYTES after decoding, or gzip expanding more "
             "than INGEST_MAX_GZIP_RATIO times",
        415: "unsupported Content-Type or Content-Encoding",
        422: "the Idempotency-Key was used for another body (a new batch needs a new key), "
             "or no record of the body could be stored (the answer adds the first errors and "
             "a hint: records on one line, not UTF-8 text, an empty body); nothing stored",
        429: "a flood limit: the router's requests or records a minute, new routers from "
             "this address, or INGEST_MAX_UPLOADS_PER_ROUTER uploads in progress; nothing "
             "stored",
    }
    errors = {str(status): _error(descriptions[status], retry=status == 429)
              for status in (400, 401, *statuses, 429)}
    errors["503"] = _error("database unreachable; safe to retry (an upload answered with "
                           "`stored: unknown` may have been stored, unless it is retried "
                           "with its Idempotency-Key)", retry=True)
    return errors


def _notification_errors(*statuses: int) -> dict:
    descriptions = {400: "invalid body or query", 401: "missing or wrong bearer token",
                    404: "not found",
                    409: "a request with this Idempotency-Key is still in progress",
                    422: "this Idempotency-Key was used with a different body",
                    500: "delivery or database failure"}
    return {str(status): _error(descriptions[status], retry=status == 409)
            for status in (401, *statuses, 500)}


X_ID = [{"$ref": "#/components/parameters/XID"}]
TELEMETRY_BODY = {
    "required": True,
    "description": "EVE records: a JSON array of objects, or one object per line; optionally "
                   "gzip-compressed (Content-Encoding: gzip). Streamed, never buffered whole.",
    "content": {
        "application/json": {"schema": {"type": "array", "items": {
            "description": "An EVE record, a JSON object. Any other value is one rejected "
                           "record, reported in the answer's `errors`; the others are stored"}}},
        "application/x-ndjson": {"schema": {"type": "string"}},
    },
}


def _telemetry(summary: str) -> dict:
    key = {"name": "Idempotency-Key", "in": "header", "required": False,
           "description": "One per batch (e.g. file identity and byte range): a repeat with "
                          "this key and the same decoded body within "
                          "INGEST_IDEMPOTENCY_KEY_DAYS gets the first answer again and stores "
                          "nothing; per router and endpoint",
           "schema": IDEMPOTENCY_KEY}
    replayed = {"Idempotent-Replayed": {
        "description": "`true` when this is the first answer to the Idempotency-Key, given "
                       "again; nothing was stored by this request",
        "schema": {"type": "string", "enum": ["true"]}}}
    return {"post": {
        "summary": summary, "parameters": X_ID + [key], "requestBody": TELEMETRY_BODY,
        "responses": {"200": _json(_ref("IngestReport"), "stored: every accepted record",
                                   replayed),
                      **_router_errors(403, 408, 413, 415, 422)}}}


def _rules(kind: str, schema: str, found: bool = True) -> dict:
    etag = {"ETag": {"description": "weak validator of the content",
                     "schema": {"type": "string"}}}
    return {"get": {
        "summary": f"The router's latest {kind} payload",
        "parameters": X_ID + [{"name": "If-None-Match", "in": "header", "required": False,
                               "description": "ETag of the copy the router holds",
                               "schema": {"type": "string"}}],
        "responses": {"200": _json(_ref(schema), "the payload (gzip-encoded when accepted)",
                                   etag),
                      "304": {"description": "unchanged since the given ETag", "headers": etag},
                      **_router_errors(403, *((404,) if found else ()))}}}


def _enforced() -> dict:
    count = {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}
    entry = {"type": "object", "required": ["address", "packets", "bytes"],
             "additionalProperties": False,
             "properties": {"address": {"type": "string", "maxLength": 64},
                            "packets": count, "bytes": count}}

    def listed(alerts: bool) -> dict:
        properties = {"packets": count, "bytes": count,
                      "entries": {"type": "array", "maxItems": MAX_ENTRIES, "items": entry}}
        return {"type": "object", "required": ["packets", "bytes"],
                "additionalProperties": False,
                "properties": {**properties, **({"alerts": count} if alerts else {})}}
    stored = {"type": "object", "required": ["entries", "ignored", "over_budget"],
              "properties": {name: {"type": "integer"}
                             for name in ("entries", "ignored", "over_budget")}}
    return {"post": {
        "summary": "Report what the router's block-list sets dropped and its rules alerted "
                   "since its last report (docs/router-api.md, \"Enforcement reports\")",
        "parameters": X_ID,
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["lists"], "additionalProperties": False,
            "properties": {"lists": {
                "type": "object", "additionalProperties": False,
                "properties": {"firewall": listed(False), "fleet": listed(False),
                               "intel": listed(True), IDS: {
                                   "type": "object", "additionalProperties": False,
                                   "description": "the IDS rules' alerts by their source "
                                                  "(the payload's reason)",
                                   "properties": dict.fromkeys(RULE_SOURCES, count)}}}}}}}},
        "responses": {"200": _json({"type": "object", "required": ["lists"], "properties": {
            "lists": {"type": "object", "additionalProperties": stored}}}, "stored"),
            **_router_errors(403, 408, 413)}}}


def _intel() -> dict:
    """GET /rules/intel: the shared-document answer, with the capacity, delta and serial."""
    return _versioned(_rules("threat intelligence: Suricata datasets, the rules file that "
                             "loads them and block-list entries (one document for each "
                             "capacity routers name, less the router's own allowlist; "
                             "docs/router-api.md)", "IntelDocument", found=False))


def _fleet() -> dict:
    """GET /rules/fleet: as the threat intelligence's, its own schema."""
    return _versioned(_rules("fleet's shared block list (one for each size of set routers "
                             "name in Router-Capacity, less the router's own allowlist; "
                             "docs/router-api.md)", "FleetList", found=False))


def _versioned(document: dict) -> dict:
    """A versioned shared document's answer: its serial said in a header."""
    # Router-Capacity and ?delta=1 or 2 (docs/router-api.md) are left out, as ?delta was: their
    # grammar is more than a schema says (each name once, ja4 0 or 1; any other delta is
    # the whole document), and a fuzzer's schema-valid value refused would read as a defect.
    get = document["get"]
    get["responses"]["200"]["headers"]["Document-Serial"] = {
        "description": "the number of the version the answer holds (absent for a router's "
                       "own copy)", "schema": {"type": "integer"}}
    return document


def _send(kind) -> dict:
    body_schema = {"type": "object", "required": ["userId", "recipient", kind.field],
                   "properties": {"userId": _ref("Field"),
                                  "recipient": {"type": "string", "format": "email",
                                                "maxLength": 254},
                                  kind.field: _ref("Field")}}
    return {"post": {
        "summary": f"Store and email a {kind.name} notification",
        "parameters": [{
            "name": "Idempotency-Key", "in": "header", "required": False,
            "description": "Repeats with this key and the same body within "
                           "NOTIFICATION_IDEMPOTENCY_HOURS get the first answer again; "
                           "nothing is stored or sent twice",
            "schema": IDEMPOTENCY_KEY}],
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": body_schema}}},
        "responses": {"200": _json(_ref("Message"), f"stored and sent: {kind.reply!r}"),
                      **_notification_errors(400, 409, 422)}}}


def _paths() -> dict:
    paths = {
        "/health": {"get": {
            "summary": "Service and database check; neither registers nor writes",
            "parameters": X_ID,
            "responses": {"200": _json(_ref("Health"), "healthy"),
                          "400": _error("X-ID not a MAC address"),
                          "401": _error("X-ID header missing"),
                          "503": _json(_ref("Health"), "database unreachable",
                                       {"Retry-After": {"$ref":
                                                        "#/components/headers/RetryAfter"}})}}},
        "/enroll": {"post": {
            "summary": "Issue the router its key, once, against the fleet's ENROLLMENT_TOKEN "
                       "(sent as the bearer token)",
            "parameters": X_ID,
            "security": [{"bearer": []}],
            "responses": {"201": _json({"type": "object", "required": ["key"],
                                        "properties": {"key": {"type": "string"}}},
                                       "the router key; shown once"),
                          "400": _error("X-ID not a MAC address or sent more than once"),
                          "401": _error("X-ID header missing, or wrong enrollment token"),
                          "403": _error("enrollment is off, or the router is not subscribed "
                                        "(closed registration)"),
                          "409": _error("the router has a key already; an operator must "
                                        "reset it first"),
                          "503": _error("database unreachable; safe to retry", retry=True)}}},
        "/log/events": _telemetry("Store IDS events (EVE alert records)"),
        "/log/cfm": _telemetry("Store flow metadata (EVE flow records)"),
        "/rules/last_updated": {"get": {
            "summary": "When the router's payloads last changed; records an activation",
            "parameters": X_ID,
            "responses": {"200": _json(_ref("LastUpdated"), "timestamps"),
                          **_router_errors(403)}}},
        "/rules/applied": {"post": {
            "summary": "Report what the agent loaded (optional for agents); says whether those "
                       "are the current payloads",
            "parameters": X_ID,
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["ok"], "additionalProperties": False,
                "properties": {
                    "ids_etag": {"type": "string", "nullable": True, "minLength": 1,
                                 "maxLength": MAX_ETAG, "pattern": ETAG_PATTERN},
                    "firewall_etag": {"type": "string", "nullable": True, "minLength": 1,
                                      "maxLength": MAX_ETAG, "pattern": ETAG_PATTERN},
                    "ok": {"type": "boolean"},
                    "detail": {"type": "string", "nullable": True, "maxLength": 1000}}}}}},
            "responses": {"200": _json({"type": "object",
                                        "required": ["ids_current", "firewall_current"],
                                        "properties": {"ids_current": {"type": "boolean"},
                                                       "firewall_current": {"type": "boolean"}}},
                                       "stored"),
                          **_router_errors(403, 413)}}},
        "/rules/enforced": _enforced(),
        "/rules/ids": _rules("IDS", "IdsPayload"),
        "/rules/firewall": _rules("firewall", "FirewallPayload"),
        "/rules/fleet": _fleet(),
        "/rules/intel": _intel(),
        "/metrics": {"get": {
            "summary": "Prometheus metrics of this process",
            "responses": {"200": {"description": "text exposition format",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": {"get": {
            "summary": "This document",
            "responses": {"200": _json({"type": "object"}, "the OpenAPI document")}}},
    }
    api = {f"/api/notifications/{kind.path}": _send(kind) for kind in TYPES}
    api["/api/notifications/{notificationId}"] = {"get": {
        "summary": "One notification with its delivery attempts and last error",
        "parameters": [{"name": "notificationId", "in": "path", "required": True,
                        "schema": {"type": "string", "format": "uuid"}}],
        "responses": {"200": _json(_ref("NotificationDelivery"), "the notification"),
                      **_notification_errors(404)}}}
    api["/api/notifications/{notificationId}/read"] = {"put": {
        "summary": "Mark a notification read (again: unchanged)",
        "parameters": [{"name": "notificationId", "in": "path", "required": True,
                        "schema": {"type": "string"}}],
        "responses": {"200": _json(_ref("MarkedRead"), "the notification, read"),
                      **_notification_errors(404)}}}
    api["/api/workflow/users/{userId}/notifications"] = {"get": {
        "summary": "A user's notifications, newest first",
        "parameters": [
            {"name": "userId", "in": "path", "required": True, "schema": {"type": "string"}},
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}},
            {"name": "offset", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 0, "maximum": 999_999_999,
                        "default": 0}},
            {"name": "read", "in": "query", "required": False,
             "description": "only read (true) or unread (false) notifications",
             "schema": {"type": "string", "enum": ["true", "false"]}}],
        "responses": {"200": _json(_ref("NotificationPage"),
                                   "one page, the total matching the filter and the user's "
                                   "unread count"),
                      **_notification_errors(400, 404)}}}
    api["/api/workflow/users/{userId}/notifications/read"] = {"put": {
        "summary": "Mark every notification of a user read",
        "parameters": [
            {"name": "userId", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": _json(_ref("MarkedAllRead"), "how many were unread"),
                      **_notification_errors(404)}}}
    api.update(_owners())
    for item in api.values():
        for operation in item.values():
            operation["security"] = [{}, {"bearer": []}]
            operation.setdefault("tags", ["notifications"])
    return {**paths, **api}


def _owners() -> dict:
    """The owners' API (server/handlers/owners.py): every route names a user and, but for
    two, one of their routers (404 when it is not theirs or not at all)."""
    user = {"name": "userId", "in": "path", "required": True,
            "schema": {"type": "string", "maxLength": 256}}
    router = [user, {"name": "mac", "in": "path", "required": True,
                     "schema": {"type": "string", "maxLength": 64}}]
    page = [{"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}},
            {"name": "offset", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 0, "maximum": 999_999_999,
                        "default": 0}}]
    answer = {"type": "object"}
    base = "/api/owners/{userId}/routers/{mac}"

    def read(summary: str, parameters: list, statuses=(400, 404)) -> dict:
        return {"summary": summary, "parameters": parameters, "tags": ["owners"],
                "responses": {"200": _json(answer, "found"),
                              **_notification_errors(*statuses)}}

    mark_body = {"type": "object", "required": ["what", "value"], "properties": {
        "what": {"type": "string", "enum": ["address", "signature", "sighting"]},
        "value": {"type": "string", "minLength": 1, "maxLength": 300,
                  "description": "an address; a signature's sid; a sighting's markValue"},
        "note": {"type": "string", "nullable": True, "maxLength": 500}}}
    schedule_body = {"type": "object", "properties": {
        "weekly": {"type": "boolean"},
        "at": {"type": "string", "maxLength": 40, "description": "e.g. 'mon 08:00'"},
        "zone": {"type": "string", "maxLength": 64, "description": "e.g. Europe/Prague"}}}
    return {
        "/api/owners/{userId}/routers": {"get": read("The user's routers", [user], (404,))},
        f"{base}/summary": {"get": read("The router's figures of the last day or week, as "
                                        "the weekly report gives them", router + [
            {"name": "period", "in": "query", "required": False,
             "schema": {"type": "string", "enum": ["week", "day"], "default": "week"}}])},
        f"{base}/alerts": {"get": read("The router's hourly alert summaries of the last 30 "
                                       "days (as far back as kept), newest first", router + page)},
        f"{base}/sightings": {"get": read("The router's threat sightings of the last 30 days, "
                                          "newest first", router + page)},
        f"{base}/false-positives": {
            "get": read("The owner's marks 'not an attack' of the router, newest first",
                        router + page),
            "post": {"summary": "Mark an address, a signature or a sighting 'not an "
                                "attack' for this router (again: the mark stored)",
                     "parameters": router, "tags": ["owners"],
                     "requestBody": {"required": True, "content": {
                         "application/json": {"schema": mark_body}}},
                     "responses": {"201": _json(answer, "marked"),
                                   "409": _json(answer, "marked already: the error, and "
                                                "that mark (falsePositive)"),
                                   "429": _error("the router's marks of the day are used up",
                                                 retry=True),
                                   **_notification_errors(400, 404)}}},
        f"{base}/false-positives/{{markId}}": {"delete": {
            "summary": "Undo a mark", "tags": ["owners"],
            "parameters": router + [{"name": "markId", "in": "path", "required": True,
                                     "schema": {"type": "integer", "minimum": 1,
                                                "maximum": 10**17}}],
            "responses": {"200": _json(_ref("Message"), "undone"),
                          **_notification_errors(400, 404)}}},
        "/api/owners/{userId}/weekly-report": {"put": {
            "summary": "The user's weekly report on or off, and when", "tags": ["owners"],
            "parameters": [user],
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": schedule_body}}},
            "responses": {"200": _json(answer, "the schedule now"),
                          **_notification_errors(400, 404)}}}}


def _schemas() -> dict:
    timestamp = {"type": "string", "format": "date-time"}
    nullable_timestamp = {**timestamp, "nullable": True}
    notification_fields = {
        "id": {"type": "string", "format": "uuid"}, "userId": {"type": "string"},
        "type": {"type": "string"}, "read": {"type": "boolean"}, "title": {"type": "string"},
        "status": {"type": "string", "enum": ["pending", "sent", "failed"]},
        "createdAt": timestamp}
    full_fields = {**notification_fields, "channel": {"type": "string", "enum": ["email"]},
                   "message": {"type": "string"}, "recipient": {"type": "string"},
                   "metadata": {"type": "object"}, "sentAt": nullable_timestamp}
    return {
        "Error": {"type": "object", "required": ["error"],
                  "properties": {"error": {"type": "string"},
                                 "stored": {"type": "string", "enum": ["unknown"],
                                            "description": "telemetry 503 only: the "
                                            "connection was lost as the records were "
                                            "committed, and whether they were could not be "
                                            "asked"}}},
        "Health": {"type": "object", "required": ["status", "database"],
                   "properties": {"status": {"type": "string", "enum": ["ok", "unavailable"]},
                                  "database": {"type": "string"},
                                  "version": {"type": "string"},
                                  "ruleset": {
                                      "type": "object", "nullable": True,
                                      "description": "the ruleset in use; null before the "
                                                     "first is published",
                                      "required": ["version", "published_at", "age_seconds"],
                                      "properties": {"version": {"type": "string"},
                                                     "published_at": timestamp,
                                                     "age_seconds": {"type": "integer"}}},
                                  "error": {"type": "string"}}},
        "IngestReport": {"type": "object", "required": ["accepted", "rejected", "errors"],
                         "properties": {
                             "accepted": {"type": "integer", "minimum": 0},
                             "rejected": {"type": "integer", "minimum": 0},
                             "errors": {"type": "array", "items": {
                                 "type": "object", "required": ["line", "error"],
                                 "properties": {"line": {"type": "integer", "minimum": 1},
                                                "error": {"type": "string"}}}},
                             "unread": {
                                 "type": "object",
                                 "description": "records stored as sent that this endpoint "
                                                "does not read, by event_type",
                                 "required": ["records", "event_types", "hint"],
                                 "properties": {
                                     "records": {"type": "integer", "minimum": 1},
                                     "event_types": {"type": "object",
                                                     "additionalProperties": {
                                                         "type": "integer"}},
                                     "hint": {"type": "string"}}}}},
        "LastUpdated": {"type": "object",
                        "required": ["ids_updated_at", "firewall_updated_at", "fleet_etag",
                                     "intel_etag"],
                        "properties": {"ids_updated_at": nullable_timestamp,
                                       "firewall_updated_at": nullable_timestamp,
                                       "fleet_etag": {"type": "string", "description":
                                                      "the ETag GET /rules/fleet answers "
                                                      "now"},
                                       "intel_etag": {"type": "string", "description":
                                                      "the ETag GET /rules/intel answers "
                                                      "now"}}},
        "IdsPayload": {"type": "object", "required": ["version", "rule_count", "rules"],
                       "properties": {
                           "version": {"type": "string"}, "rule_count": {"type": "integer"},
                           "rules": {"type": "array", "items": {
                               "type": "object",
                               "required": ["gid", "sid", "rev", "action", "raw", "reason"],
                               "properties": {
                                   "gid": {"type": "integer"}, "sid": {"type": "integer"},
                                   "rev": {"type": "integer"}, "action": {"type": "string"},
                                   "msg": {"type": "string", "nullable": True},
                                   "classtype": {"type": "string", "nullable": True},
                                   "weight": {"type": "number"},
                                   "reason": {"type": "string",
                                              "enum": ["override", "fired", "fleet",
                                                       "sampled", "flowbits"]},
                                   "fleet_networks": {"type": "integer", "description":
                                                      "reason fleet: the networks whose "
                                                      "routers it fired at"},
                                   "override": {"type": "integer",
                                                "description": "the rule override that "
                                                               "put the rule in"},
                                   "raw": {"type": "string"}}}}}},
        "FirewallPayload": {"type": "object",
                            "required": ["version", "entry_count", "truncated", "entries"],
                            "properties": {
                                "version": {"type": "string"},
                                "entry_count": {"type": "integer"},
                                "truncated": {"type": "boolean"},
                                "entries": {"type": "array", "items": {
                                    "type": "object",
                                    "required": ["address", "family", "reasons",
                                                 "expires_at"],
                                    "properties": {
                                        "address": {"type": "string"},
                                        "family": {"type": "integer", "enum": [4, 6]},
                                        "reasons": {"type": "array", "items": {
                                            "type": "string",
                                            "enum": ["alert", "compromised-ips"]}},
                                        "expires_at": {**timestamp, "nullable": True},
                                        "alerts": {"type": "array", "items": {
                                            "type": "object",
                                            "required": ["sid", "severity", "count",
                                                         "flows"],
                                            "properties": {
                                                "sid": {"type": "integer"},
                                                "severity": {"type": "integer"},
                                                "count": {"type": "integer"},
                                                "flows": {"type": "integer"}}}}}}}}},
        "IntelDocument": {"type": "object",
                          "required": ["entry_count", "files", "rules", "block"],
                          "properties": {
                              "entry_count": {"type": "integer"},
                              "files": {"type": "object", "description": "file name -> its "
                                        "text, written beside the rules file",
                                        "additionalProperties": {"type": "string"}},
                              "rules": {"type": "string"},
                              "block": {"type": "array", "items": {
                                  "type": "object",
                                  "required": ["address", "family", "reasons", "expires_at"],
                                  "properties": {
                                      "address": {"type": "string"},
                                      "family": {"type": "integer", "enum": [4, 6]},
                                      "reasons": {"type": "array", "items": {
                                          "type": "string", "enum": ["intel"]}},
                                      "expires_at": timestamp}}}}},
        "FleetList": {"type": "object", "required": ["entry_count", "entries"],
                      "properties": {
                          "entry_count": {"type": "integer"},
                          "entries": {"type": "array", "items": {
                              "type": "object",
                              "required": ["address", "family", "reasons", "expires_at",
                                           "fleet"],
                              "properties": {
                                  "address": {"type": "string"},
                                  "family": {"type": "integer", "enum": [4, 6]},
                                  "reasons": {"type": "array", "items": {
                                      "type": "string", "enum": ["fleet"]}},
                                  "expires_at": timestamp,
                                  "fleet": {"type": "object", "properties": {
                                      "routers": {"type": "integer"},
                                      "networks": {"type": "integer"},
                                      "signatures": {"type": "array",
                                                     "items": {"type": "integer"}},
                                      "first_seen": timestamp,
                                      "last_seen": timestamp}}}}}}},
        "Field": {"type": "string", "minLength": 1, "maxLength": MAX_FIELD,
                  "pattern": plain_text_pattern(),
                  "description": "Plain text: no control, format, private-use or unassigned "
                                 "characters (Unicode categories C*) and no line or paragraph "
                                 "separators, as of the server's Unicode version; the value "
                                 "goes into email headers"},
        "Message": {"type": "object", "required": ["message"],
                    "properties": {"message": {"type": "string"}}},
        "Notification": {"type": "object", "required": list(full_fields),
                         "properties": full_fields},
        "MarkedRead": {"type": "object", "required": ["message", "notification"],
                       "properties": {"message": {"type": "string"},
                                      "notification": _ref("Notification")}},
        "MarkedAllRead": {"type": "object", "required": ["message", "updated"],
                          "properties": {"message": {"type": "string"},
                                         "updated": {"type": "integer", "minimum": 0}}},
        "NotificationDelivery": {
            "type": "object", "required": [*full_fields, "attempts", "lastError",
                                           "nextAttemptAt"],
            "properties": {**full_fields, "lastError": {"type": "string", "nullable": True},
                           "nextAttemptAt": nullable_timestamp,
                           "attempts": {"type": "array", "items": {
                               "type": "object",
                               "required": ["attempt", "at", "outcome", "error"],
                               "properties": {
                                   "attempt": {"type": "integer", "minimum": 1},
                                   "at": timestamp,
                                   "outcome": {"type": "string",
                                               "enum": ["sent", "failed", "undeliverable"]},
                                   "error": {"type": "string", "nullable": True}}}}}},
        "NotificationPage": {"type": "object",
                             "required": ["notifications", "total", "unread"],
                             "properties": {
                                 "total": {"type": "integer", "minimum": 0},
                                 "unread": {"type": "integer", "minimum": 0},
                                 "notifications": {"type": "array", "items": {
                                     "type": "object", "required": list(notification_fields),
                                     "properties": notification_fields}}}},
    }


@functools.cache
def openapi_document() -> dict:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Router IDS backend", "version": SERVICE_VERSION,
                 "description": "Router API (telemetry in, per-router rules out) and the "
                                "notification API under /api/. Errors are JSON "
                                "{\"error\": \"...\"}."},
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "parameters": {"XID": {
                "name": "X-ID", "in": "header", "required": True,
                "description": "The router's MAC address (aa:bb:cc:dd:ee:ff, AA-BB-CC-DD-EE-FF, "
                               "aabb.ccdd.eeff or aabbccddeeff)",
                "schema": {"type": "string", "pattern": f"^(?:{MAC_PATTERN})$"},
                "example": EXAMPLE_MAC}},
            "headers": {"RetryAfter": {"description": "seconds to wait before retrying",
                                       "schema": {"type": "string"}}},
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "required when NOTIFICATION_API_TOKEN is set"}},
        },
    }
