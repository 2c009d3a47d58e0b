"""Check one raw telemetry record (Suricata EVE JSON) and read the fields the summary and
the SQL view of records use (server/telemetry/).

The record is stored as received; the fields are checked when present. A present field of
the wrong type or shape, or a value PostgreSQL's jsonb refuses, rejects the record with a
message naming it, so every stored record reads back as a row of the SQL view.
"""

from __future__ import annotations

import re
import socket
from datetime import datetime, timezone

import orjson


class RecordError(ValueError):
    """This record is rejected; the rest of the body goes on."""


FLOW_COLUMNS = ("event_time", "event_type", "src_ip", "src_port", "dest_ip", "dest_port",
                "proto", "app_proto")
ALERT_COLUMNS = ("signature_id", "severity")
EVENT_COLUMNS = FLOW_COLUMNS + ALERT_COLUMNS
CFM_COLUMNS = FLOW_COLUMNS

# PostgreSQL's jsonb refuses the NUL character, escaped or not.
_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
_MAX_TEXT = 256

# jsonb stores a number as numeric, whose scale (digits after the point, as written: the
# fraction's digits minus the exponent) is at most 16383. orjson accepts such numbers (as
# doubles they are 0.0), and PostgreSQL would refuse the whole batch; numbers too large for
# numeric are already too large for orjson (infinity). The prefilter, anchored at the start
# of a digit run so it stays linear, lets only a negative exponent of 4+ digits or a run of
# 4096 digits through to the exact check. The exponent's pattern begins with its literal
# '-' (the e before it looked behind at): the regex engine then scans for that one byte,
# 0.35 us an EVE record, where a search for "e-" and "E-" took 1.3 (e is everywhere).
NUMERIC_MAX_SCALE = 16383
_NEGATIVE_EXPONENT = re.compile(rb"-(?<=[eE]-)0*[1-9][0-9]{3}")
_LONG_DIGITS = re.compile(rb"(?<![0-9])[0-9]{4096}")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NUMBER = re.compile(rb"-?[0-9]+(?:\.([0-9]+))?(?:[eE]([+-]?)([0-9]+))?")


def _timestamp(value: object, field: str) -> datetime:
    """The moment, with its zone (UTC when it names none). Written out for PostgreSQL in
    UTC (utc_text), since PostgreSQL refuses zone offsets beyond 15:59, which Python
    accepts; only in the first and last years can that conversion overflow."""
    if not isinstance(value, str) or len(value) > 64:
        raise RecordError(f"{field}: expected an ISO 8601 timestamp")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise RecordError(f"{field}: not an ISO 8601 timestamp: {value[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    if moment.year in (1, 9999):
        try:
            moment.astimezone(timezone.utc)
        except OverflowError:
            raise RecordError(f"{field}: out of range: {value[:40]!r}") from None
    return moment


def utc_text(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


# Addresses already found valid: a router's records repeat a few addresses, and a lookup
# costs a third of inet_pton's tries (a sixth for IPv6). Emptied when full, so a stream of
# fresh addresses costs what it cost without.
_ADDRESSES_SEEN: set[str] = set()
_ADDRESSES_KEPT = 4096


def _ip(value: object, field: str) -> str:
    if type(value) is str and value in _ADDRESSES_SEEN:
        return value
    if isinstance(value, str) and len(value) <= 45:
        for family in (socket.AF_INET, socket.AF_INET6):
            try:
                socket.inet_pton(family, value)
            except OSError:
                continue
            if len(_ADDRESSES_SEEN) >= _ADDRESSES_KEPT:
                _ADDRESSES_SEEN.clear()
            _ADDRESSES_SEEN.add(value)
            return value
    raise RecordError(f"{field}: not an IP address")


def _integer(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    raise RecordError(f"{field}: expected an integer from {low} to {high}")


def _text(value: object, field: str) -> str:
    if isinstance(value, str) and len(value) <= _MAX_TEXT:
        return value
    raise RecordError(f"{field}: expected a string of at most {_MAX_TEXT} characters")


def flow_fields(record: dict) -> list:
    """Values of FLOW_COLUMNS, in that order (written out: this runs once per record)."""
    get = record.get
    timestamp, event_type, proto, app_proto = (get("timestamp"), get("event_type"),
                                               get("proto"), get("app_proto"))
    src_ip, src_port, dest_ip, dest_port = (get("src_ip"), get("src_port"), get("dest_ip"),
                                            get("dest_port"))
    return [
        None if timestamp is None else _timestamp(timestamp, "timestamp"),
        None if event_type is None else _text(event_type, "event_type"),
        None if src_ip is None else _ip(src_ip, "src_ip"),
        None if src_port is None else _integer(src_port, "src_port", 0, 65535),
        None if dest_ip is None else _ip(dest_ip, "dest_ip"),
        None if dest_port is None else _integer(dest_port, "dest_port", 0, 65535),
        None if proto is None else _text(proto, "proto"),
        None if app_proto is None else _text(app_proto, "app_proto"),
    ]


def alert_fields(record: dict) -> list:
    """Values of ALERT_COLUMNS, from the record's `alert` object."""
    alert = record.get("alert")
    if alert is None:
        return [None, None]
    if not isinstance(alert, dict):
        raise RecordError("alert: expected an object")
    signature_id, severity = alert.get("signature_id"), alert.get("severity")
    return [
        None if signature_id is None else _integer(signature_id, "alert.signature_id", 0,
                                                   2**63 - 1),
        None if severity is None else _integer(severity, "alert.severity", 0, 255),
    ]


def event_row(record: dict) -> list:
    return flow_fields(record) + alert_fields(record)


def cfm_row(record: dict) -> list:
    return flow_fields(record)


ROW_OF = {"events": event_row, "cfm": cfm_row}   # by kind: sent to /log/events or /log/cfm


def _scale_suspect(raw: bytes) -> bool:
    """The prefilter: each regex runs only where it can match."""
    if _NEGATIVE_EXPONENT.search(raw) is not None:
        return True
    return len(raw) >= 4096 and _LONG_DIGITS.search(raw) is not None


def _numbers_fit(raw: bytes) -> bool:
    """Whether every number of a valid JSON text has a scale PostgreSQL can store."""
    structure = _STRING.sub(b'""', raw)  # what is left outside strings: numbers and syntax
    for match in _NUMBER.finditer(structure):
        fraction, sign, exponent = match.groups()
        digits = (exponent or b"").lstrip(b"0")
        power = int(digits or b"0") if len(digits) <= 9 else 10**9  # capped: past any limit
        scale = len(fraction or b"") + (power if sign == b"-" else -power)
        if scale > NUMERIC_MAX_SCALE:
            return False
    return True


def validate(raw: bytes, row_of) -> tuple[list, dict]:
    """Check `raw` as one storable record; its column values (`row_of`: event_row or
    cfm_row) and the parsed record. RecordError names what is wrong."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise RecordError(f"invalid JSON: {error}") from None
    if not isinstance(record, dict):
        raise RecordError("record is not a JSON object")
    if not record:
        raise RecordError("record is empty")
    # (a NUL escape needs a backslash: a one-byte search rules most records out, 5x faster)
    if raw.find(b"\\") >= 0 and raw.find(b"\\u0000") >= 0 and _NUL_ESCAPE.search(raw):
        raise RecordError("record contains a NUL character (\\u0000), which cannot be stored")
    if _scale_suspect(raw) and not _numbers_fit(raw):
        raise RecordError(f"record has a number with more than {NUMERIC_MAX_SCALE} digits "
                          "after the decimal point, which cannot be stored")
    return row_of(record), record
