"""Handlers of the router API: health, telemetry ingestion, rule polling."""

from __future__ import annotations

import functools
import gzip

from aiohttp import web

from ruledata.workspace import Workspace
from server import SERVICE_VERSION
from server.enforcement.config import EnforcementConfig
from server.enforcement.report import MAX_BODY_BYTES as REPORT_MAX_BYTES, parse_report
from server.enforcement.store import store_report
from server.routers.applied import read_json, read_report
from server.generation import applied_sql as applied_db
from server.generation import rules_sql as rules_db
from server.db.pool import DatabaseUnavailable
from server.errors import NotFound, json_response
from server.polling.etag_cache import etag_header, not_modified, wanted_etags
from server.polling.capacity import HEADER as CAPACITY_HEADER, declared
from server.fleet.document import FleetList
from server.intel.document import IntelList
from server.polling.shared_document import Served
from server.polling.versioned import VersionedDocument
from server.routers.identity import mac_from_header
from server.idempotency_key import idempotency_key
from server.ingest.body import Body
from server.ingest.idempotency import REPLAYED_HEADER
from server.ingest.ingest import Upload
from server.web.peers import client_address
from server.settings import Settings
from server.timestamps import iso_utc
from server.typedefs import (DATABASE, DECLARATIONS, ETAG_CACHE, FLEET_LIST, INTEL_LIST, FLOOD_LIMITS, INGESTION, METRICS,
                             ROUTER_KEYS, ROUTER_REGISTRY, SETTINGS, TRAFFIC_TALLY,
                             UPLOAD_SLOTS)


# The number of the version of the threat intelligence document an answer holds.
SERIAL_HEADER = "Document-Serial"

# `?delta=`: 1 removals named, 2 removals as places (engine/places.py).
DELTA_FORMS = ("1", "2")

ROUTES = web.RouteTableDef()


def admitted(request: web.Request) -> str | None:
    """The calling router's MAC, its request budget taken, when this process admitted it
    lately with a key it trusts (ROUTER_AUTH=key): no await, for every poll passes here.
    None when the database must be asked (`admit`)."""
    headers = request.headers
    mac = mac_from_header(headers)
    app = request.app
    if app[SETTINGS].router_auth == "key" and not app[ROUTER_KEYS].trusted(headers, mac):
        return None
    if not app[ROUTER_REGISTRY].admitted(mac):
        return None
    app[FLOOD_LIMITS].request(mac)
    return mac


async def admit(request: web.Request) -> str:
    """The calling router's MAC once its key, its request budget and its registration are
    checked (a key first: nobody spends another router's budget)."""
    mac = mac_from_header(request.headers)
    app = request.app
    settings = app[SETTINGS]
    if settings.router_auth == "key" and not app[ROUTER_KEYS].trusted(request.headers, mac):
        await app[ROUTER_KEYS].check(
            request.headers, client_address(request, settings.trusted_proxies), mac)
    app[FLOOD_LIMITS].request(mac)
    registry = app[ROUTER_REGISTRY]
    if not registry.admitted(mac):
        await registry.admit(mac, lambda: client_address(request, settings.trusted_proxies))
    return mac


def for_router(handler):
    """A router handler, called with the router's MAC once it is admitted (`admitted`, else
    `admit`): the one step every router endpoint but /health and /enroll passes, once a
    request."""
    @functools.wraps(handler)
    async def admitted_first(request: web.Request) -> web.StreamResponse:
        mac = admitted(request) or await admit(request)
        return await handler(request, mac)
    return admitted_first


@ROUTES.post("/enroll")
async def enroll(request: web.Request) -> web.Response:
    """A router's key, once, against the fleet's ENROLLMENT_TOKEN."""
    mac = mac_from_header(request.headers)
    settings = request.app[SETTINGS]
    key, outcome = await request.app[ROUTER_KEYS].enroll(
        request.headers, client_address(request, settings.trusted_proxies), mac,
        settings.enrollment_token, settings.registration_mode == "open")
    if outcome.new_router:
        request.app[ROUTER_REGISTRY].note_new_router(mac)
    return json_response({"key": key}, status=201)


@ROUTES.get("/health")
async def health(request: web.Request) -> web.Response:
    """Checks the header's form only: a health probe neither registers nor writes."""
    mac_from_header(request.headers)
    try:
        await request.app[DATABASE].fetchone("SELECT 1")
    except DatabaseUnavailable as error:
        retry = str(request.app[SETTINGS].db_retry_after_seconds)
        return json_response({"status": "unavailable", "database": "unreachable",
                              "error": f"database unreachable: {error}"},
                             status=503, headers={"Retry-After": retry})
    return json_response({"status": "ok", "database": "ok", "version": SERVICE_VERSION,
                          "ruleset": _ruleset(request.app[SETTINGS])})


def _ruleset(settings: Settings) -> dict | None:
    current = Workspace(settings.rule_data_path).current_ruleset()
    if current is None:
        return None
    return {"version": current.version, "published_at": iso_utc(current.published_at),
            "age_seconds": current.age_seconds}


async def post_records(request: web.Request, mac: str, kind: str) -> web.Response:
    """An upload of IDS events or flow records (server/ingest/ingest.py)."""
    client = client_address(request, request.app[SETTINGS].trusted_proxies)
    address = request.app[FLOOD_LIMITS].bucket(client)
    upload = Upload(request.content_type, idempotency_key(request.headers), Body(
        request.content, request.headers.get("Content-Encoding", "identity").strip().lower(),
        request.content_length), client)
    with request.app[UPLOAD_SLOTS].take(mac, address):
        ingested = await request.app[INGESTION].ingest(upload, mac, kind)
    report = ingested.answer
    if ingested.replayed:
        return json_response(report, headers={REPLAYED_HEADER: "true"})
    records = request.app[METRICS].records
    records.labels(kind, "accepted").inc(report["accepted"])
    records.labels(kind, "rejected").inc(report["rejected"])
    request.app[TRAFFIC_TALLY].add(kind, report["accepted"], report["rejected"])
    return json_response(report)


for _kind in ("events", "cfm"):
    ROUTES.post(f"/log/{_kind}")(for_router(functools.partial(post_records, kind=_kind)))


@ROUTES.get("/rules/last_updated")
@for_router
async def last_updated(request: web.Request, mac: str) -> web.Response:
    holds = declared(request.headers.get(CAPACITY_HEADER))  # a malformed capacity
    fleet_list, intel_list = _fleet_list(request), _intel_list(request)  # refused first
    address = client_address(request, request.app[SETTINGS].trusted_proxies)
    declarations = request.app[DECLARATIONS]
    written = None if declarations.unchanged(mac, holds) else holds
    ids_at, firewall_at = await rules_db.activate_and_read_timestamps(
        request.app[DATABASE], mac, address if address != "-" else None, written)
    if written is not None:
        declarations.written(mac, holds)
    request.app[TRAFFIC_TALLY].poll()
    fleet = await fleet_list.served(mac)
    intel = await intel_list.served(mac)
    return json_response({"ids_updated_at": iso_utc(ids_at),
                          "firewall_updated_at": iso_utc(firewall_at),
                          "fleet_etag": fleet.header, "intel_etag": intel.header})


@ROUTES.post("/rules/applied")
@for_router
async def rules_applied(request: web.Request, mac: str) -> web.Response:
    """What the agent loaded; answers whether those are the current payloads."""
    ids_etag, firewall_etag, ok, detail = await read_report(request.content,
                                                            request.content_length)
    ids_current, firewall_current = await applied_db.report(
        request.app[DATABASE], mac, ids_etag, firewall_etag, ok, detail)
    return json_response({"ids_current": ids_current, "firewall_current": firewall_current})


@ROUTES.post("/rules/enforced")
@for_router
async def rules_enforced(request: web.Request, mac: str) -> web.Response:
    """What the router's firewall sets dropped since its last report (server/enforcement/)."""
    lists = parse_report(await read_json(request.content, request.content_length,
                                         REPORT_MAX_BYTES))
    settings = request.app[SETTINGS]
    address = client_address(request, settings.trusted_proxies)
    stored = await store_report(request.app[DATABASE], EnforcementConfig.from_settings(settings),
                                mac, lists, address if address != "-" else None)
    return json_response({"lists": {done.list: done.as_json() for done in stored}})


async def payload(request: web.Request, mac: str, kind: str) -> web.Response:
    """The router's payload, or 304 when it names the current ETag: from the ETag cache
    without a query for nearly every poll (server/polling/etag_cache.py). An agent names
    the ETag header it was given, as it was given: that is one comparison."""
    cache = request.app[ETAG_CACHE]
    named = request.headers.get("If-None-Match")
    current = cache.etag(mac, kind) if named is not None else None
    if current is not None and named == etag_header(current):
        return web.Response(status=304, headers={"ETag": named})
    known = wanted_etags(",".join(request.headers.getall("If-None-Match", ())))
    if current is not None and not_modified(known, current):
        return web.Response(status=304, headers={"ETag": etag_header(current)})
    token = cache.token()
    found = await rules_db.read_payload(request.app[DATABASE], mac, kind, known)
    if found is None:
        raise NotFound(f"no {kind} rules generated for this router yet")
    etag, packed = found
    cache.remember(mac, kind, etag, token)
    if packed is None or not_modified(known, etag):  # (None: the database saw it is known)
        return web.Response(status=304, headers={"ETag": etag_header(etag)})
    return _packed_response(request, etag, packed)


for _kind in ("ids", "firewall"):
    ROUTES.get(f"/rules/{_kind}")(for_router(functools.partial(payload, kind=_kind)))


@ROUTES.get("/rules/fleet")
@for_router
async def fleet(request: web.Request, mac: str) -> web.Response:
    """The fleet's shared block list of the router's capacity (server/fleet/document.py),
    or 304 when it names the document's ETag: from memory, no query; with `?delta=1` what
    changed since the list it names (docs/router-api.md)."""
    return await _versioned(request, mac, _fleet_list(request))


@ROUTES.get("/rules/intel")
@for_router
async def intel(request: web.Request, mac: str) -> web.Response:
    """The threat intelligence document (server/intel/document.py), as the fleet's."""
    return await _versioned(request, mac, _intel_list(request))


async def _versioned(request: web.Request, mac: str, document: VersionedDocument
                     ) -> web.Response:
    """A versioned shared document; with `?delta=1` (or 2) and If-None-Match naming an earlier
    version kept, what changed since it. Admitted once: a delta that fell back to the
    whole document took the router's request budget twice."""
    if (form := request.query.get("delta")) in DELTA_FORMS:
        named = wanted_etags(",".join(request.headers.getall("If-None-Match", ())))
        if len(named) == 1 and "*" not in named:
            delta = await document.delta(mac, next(iter(named)), places=form == "2")
            if delta is not None:
                packed, etag = delta
                return _packed_response(request, etag, packed.packed)
    served = await document.served(mac)
    answer = _served(request, served)
    serial = document.serial(served)
    if serial is not None:  # the version's number (server/polling/versions.py)
        answer.headers[SERIAL_HEADER] = str(serial)
    return answer


def _fleet_list(request: web.Request) -> FleetList:
    """The fleet's list of the size the router's capacity names."""
    return request.app[FLEET_LIST].for_router(request.headers.get(CAPACITY_HEADER))


def _intel_list(request: web.Request) -> IntelList:
    """The threat intelligence document of the capacity the router names."""
    return request.app[INTEL_LIST].for_router(request.headers.get(CAPACITY_HEADER))


def _served(request: web.Request, served: Served) -> web.Response:
    named = request.headers.get("If-None-Match")
    if named is not None and (named == served.header or not_modified(
            wanted_etags(",".join(request.headers.getall("If-None-Match"))), served.etag)):
        return web.Response(status=304, headers={"ETag": served.header})
    return _packed_response(request, served.etag, served.packed)


def _packed_response(request: web.Request, etag: str, packed: bytes) -> web.Response:
    headers = {"ETag": etag_header(etag), "Cache-Control": "no-cache",
               "Vary": "Accept-Encoding"}
    if _accepts_gzip(request):
        # Stored gzip-compressed: sent as it is, no work per request.
        headers["Content-Encoding"] = "gzip"
        return web.Response(body=packed, content_type="application/json", headers=headers)
    return web.Response(body=gzip.decompress(packed), content_type="application/json",
                        headers=headers)


def _accepts_gzip(request: web.Request) -> bool:
    for coding in request.headers.get("Accept-Encoding", "").lower().split(","):
        name, _, params = coding.strip().partition(";")
        if name.strip() in ("gzip", "x-gzip", "*") and params.replace(" ", "") != "q=0":
            return True
    return False
