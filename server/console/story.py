"""One router's whole story, as its console page shows it: registration and key, last poll,
the payloads it has now (with the evidence of each firewall entry), the entries it gets from
the fleet's list (with the fleet's evidence), what its agent reported
applied, its generation state, its telemetry of the last day and week, its overrides, its
allowlist and the changes operators made for it."""

from __future__ import annotations

import gzip
from collections import Counter

import orjson

from server.console import sql as console_db
from server.db import tuning_changes
from server.db.pool import Database
from server.fleet import lists as fleet_lists
from server.generation.rules_sql import stored_payloads
from server.telemetry.chunks import decompress

TOP_BLOCKED = 20
RECENT_ALERTS = 10


async def router_story(db: Database, mac: str) -> dict | None:
    """Everything the router page shows, or None when `mac` is not registered."""
    router = await console_db.router(db, mac)
    if router is None:
        return None
    # One after another, on one connection at a time: a page never takes the pool's
    # connections from the routers' requests.
    payloads = await stored_payloads(db, mac)
    ids, firewall = _payload(payloads, 4), _payload(payloads, 5)
    applied = await console_db.applied(db, mac)
    alerts = recent_alerts(await console_db.newest_events_chunk(db, mac))
    messages = {rule["sid"]: rule["msg"] for rule in (ids or {}).get("rules", ())}
    messages.update((alert["sid"], alert["signature"]) for alert in alerts
                    if alert["sid"] not in messages)
    return {
        "mac": mac, "router": _router(router), "last_poll": await console_db.last_poll(db, mac),
        "ids": _ids(ids, payloads), "firewall": _firewall(firewall, payloads),
        "applied": _applied(applied, payloads),
        "generation": await console_db.generation(db, mac),
        "records": {kind: {"day": day, "week": week, "newest": newest_at}
                    for kind, day, week, newest_at in await console_db.records(db, mac)},
        "signatures": [{"sid": sid, "message": messages.get(sid), "severity": severity,
                        "day": day, "week": week, "last_seen": last}
                       for sid, severity, day, week, last
                       in await console_db.signatures(db, mac)],
        "recent_alerts": alerts, "overrides": await console_db.overrides(db, mac),
        "allowed": await console_db.allowed(db, mac),
        "fleet": await fleet_lists.for_router(db, mac),
        "changes": await tuning_changes.recent(db, mac)}


def _router(row: tuple) -> dict:
    mac, registered_at, registered_by, note, registered_from, key_at, key_by, open_until = row
    return {"registered_at": registered_at, "registered_by": registered_by, "note": note,
            "registered_from": registered_from, "key_issued_at": key_at, "key_issued_by": key_by,
            "enrollment_open_until": open_until}


def _payload(row: tuple | None, column: int) -> dict | None:
    if row is None or row[column] is None:
        return None
    return orjson.loads(gzip.decompress(bytes(row[column])))


def _ids(payload: dict | None, row: tuple | None) -> dict | None:
    if payload is None:
        return None
    reasons = Counter(rule["reason"] for rule in payload["rules"])
    return {"etag": row[0], "updated_at": row[1], "version": payload["version"],
            "rule_count": payload["rule_count"], "reasons": dict(reasons),
            "forced": [rule for rule in payload["rules"] if rule["reason"] == "override"]}


def _firewall(payload: dict | None, row: tuple | None) -> dict | None:
    if payload is None:
        return None
    entries = sorted(payload["entries"], key=lambda entry: (
        -sum(alert["count"] for alert in entry.get("alerts", ())), entry["address"]))
    return {"etag": row[2], "updated_at": row[3], "version": payload["version"],
            "entry_count": payload["entry_count"], "truncated": payload["truncated"],
            "from_alerts": sum(1 for entry in entries if "alert" in entry["reasons"]),
            "top": entries[:TOP_BLOCKED]}


def _applied(row: tuple | None, payloads: tuple | None) -> dict | None:
    if row is None:
        return None
    ids_etag, firewall_etag, ok, detail, reported_at = row
    current = (payloads[0], payloads[2]) if payloads else (None, None)
    return {"ok": ok, "detail": detail, "reported_at": reported_at,
            "current": (ids_etag, firewall_etag) == current}


def recent_alerts(chunk_body: bytes | None, count: int = RECENT_ALERTS) -> list[dict]:
    """The newest alert records of the router's newest chunk of events, newest first, as the
    router sent them (shown escaped: every string here is the router's to choose)."""
    if chunk_body is None:
        return []
    found = []
    for line in reversed(decompress(chunk_body)):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("alert"), dict):
            found.append(_alert(record))
            if len(found) == count:
                break
    return found


def _alert(record: dict) -> dict:
    alert, http, tls, dns = (record.get(key) if isinstance(record.get(key), dict) else {}
                             for key in ("alert", "http", "tls", "dns"))
    context = {"host": http.get("hostname") or tls.get("sni") or dns.get("rrname"),
               "url": http.get("url"), "user agent": http.get("http_user_agent")}
    return {"time": record.get("timestamp"), "sid": alert.get("signature_id"),
            "signature": alert.get("signature"), "severity": alert.get("severity"),
            "action": alert.get("action"),
            "source": _endpoint(record.get("src_ip"), record.get("src_port")),
            "destination": _endpoint(record.get("dest_ip"), record.get("dest_port")),
            "proto": record.get("proto"),
            "context": {name: value for name, value in context.items() if value}}


def _endpoint(address, port) -> str:
    return f"{address}:{port}" if port is not None else str(address or "")
