"""What generation reads of a router's telemetry, tallied as records arrive: per hour,
alerts by (signature, source, destination, severity) with their distinct flows, and flows
by application protocol and by destination port. Written with the records' chunk, in the
same transaction (server/telemetry/sql.py), so generation never scans records.

Only these records count, as generation counted them in the row tables of before: alerts
are records with `alert.signature_id` sent to /log/events; flows are records with
`event_type` flow or netflow sent to /log/cfm.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

import orjson

from engine.addresses import canonical_text
from server.settings import Settings

FLOW_IDS_KEPT = 64   # distinct flows remembered per summary row; the firewall needs 2
FLOW_ID_CHARS = 40
FLOW_TYPES = frozenset({"flow", "netflow"})
IPS_REMEMBERED = 4_096  # spellings of addresses canonicalised once per upload
CONSOLE_DAYS = 7  # the console's router page counts a week of signatures (server/console)
# An owner's frontend lists a router's alerts this far back (server/reports/summary.py): the
# alert summaries packed by day are kept that long (and a day more), at most RETENTION_DAYS.
ALERTS_LISTED_DAYS = 30

# Positions in the values of extract.py's EVENT_COLUMNS / CFM_COLUMNS.
_EVENT_TYPE, _SRC_IP, _DEST_IP, _DEST_PORT, _APP_PROTO, _SID, _SEVERITY = 1, 2, 4, 5, 7, 8, 9


def summaries_kept(settings: Settings) -> timedelta:
    """How long the retention job keeps the hourly summaries: as far back as their readers
    look (RULE_GENERATION_TELEMETRY_DAYS, FLEET_WINDOW_HOURS, the console's week), and an
    hour more, since each counts an hour while any of it is in its window; never longer
    than the records themselves (RETENTION_DAYS). Kept as long as the records, they were
    more than half of a router's bytes at the agent's cadence (docs/performance.md)."""
    read = max(timedelta(days=settings.rule_generation_telemetry_days),
               timedelta(days=CONSOLE_DAYS), timedelta(hours=settings.fleet_window_hours))
    return min(timedelta(days=settings.retention_days), read + timedelta(hours=1))


def hour_of(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def canonical_ip(value: str | None) -> str | None:
    """One spelling per address (engine/addresses.py), so one address is one summary key (as
    one inet value) and `::ffff:10.0.0.1` is 10.0.0.1 wherever it is compared."""
    return None if value is None else canonical_text(value)


def flow_id_text(value: object) -> str | None:
    """flow_id as text: a string as it is, any other value as orjson writes it (for a string
    or an integer of up to 64 bits, PostgreSQL's `record->>'flow_id'` spelling; a float, a
    larger integer, parsed as a float, or an object may be spelled otherwise: `1E2` as
    `100.0`); one longer than FLOW_ID_CHARS (Suricata's are integers of up to 20 digits)
    as a digest of it, so a hostile record cannot make summary rows large."""
    if value is None:
        return None
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    if len(text) > FLOW_ID_CHARS:
        return "#" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    return text


class Summary:
    """The summary rows of one upload (one receive time, so one hour)."""

    def __init__(self) -> None:
        self.alerts: dict[tuple, list] = {}   # key -> [alerts, flow ids, last seen or None]
        self.flows: dict[tuple, int] = {}     # (app_proto, dest_port) -> flows
        self._ips: dict[str | None, str | None] = {None: None}  # spelling -> canonical

    def __len__(self) -> int:
        return len(self.alerts) + len(self.flows)

    def add(self, kind: str, values: list, record: dict,
            received_at: datetime | None = None) -> None:
        """A checked record of `kind` (events or cfm): its column values and itself."""
        if kind == "events":
            self.add_event(values, record, received_at)
        else:
            self.add_flow(values)

    def add_event(self, values: list, record: dict, received_at: datetime | None = None
                  ) -> None:
        """`received_at`: for records of several uploads; by default all are the upload's
        (`params`' `received_at`)."""
        sid = values[_SID]
        if sid is None:
            return
        key = (sid, self._ip(values[_SRC_IP]), self._ip(values[_DEST_IP]), values[_SEVERITY])
        tally = self.alerts.get(key)
        if tally is None:
            tally = self.alerts[key] = [0, set(), received_at]
        tally[0] += 1
        if received_at is not None and received_at > tally[2]:
            tally[2] = received_at
        flow_id = flow_id_text(record.get("flow_id"))
        if flow_id is not None and len(tally[1]) < FLOW_IDS_KEPT:
            tally[1].add(flow_id)

    def _ip(self, value: str | None) -> str | None:
        canonical = self._ips.get(value)
        if canonical is None and value is not None:
            canonical = canonical_ip(value)
            if len(self._ips) < IPS_REMEMBERED:
                self._ips[value] = canonical
        return canonical

    def add_flow(self, values: list) -> None:
        if values[_EVENT_TYPE] not in FLOW_TYPES:
            return
        app_proto, dest_port = values[_APP_PROTO], values[_DEST_PORT]
        if app_proto is not None and app_proto != "failed":
            self.flows[(app_proto, None)] = self.flows.get((app_proto, None), 0) + 1
        if dest_port is not None:
            self.flows[(None, dest_port)] = self.flows.get((None, dest_port), 0) + 1

    def params(self, received_at: datetime) -> dict:
        """The summary statement's values (server/telemetry/sql.py) for an upload received at
        `received_at` (or the newest of several)."""
        return {"hour": hour_of(received_at), "summarised_at": received_at,
                "alerts": self.alert_rows(), "flows": self.flow_rows(),
                "flow_ids_kept": FLOW_IDS_KEPT}

    def alert_rows(self) -> list[dict]:
        """In key order: concurrent uploads of one router lock their rows in the same order
        (no deadlock)."""
        return [{"sid": sid, "src": src, "dest": dest, "severity": severity,
                 "alerts": count, "flow_ids": sorted(flows),
                 "last_seen": last_seen and last_seen.isoformat()}
                for (sid, src, dest, severity), (count, flows, last_seen)
                in sorted(self.alerts.items(), key=_alert_order)]

    def flow_rows(self) -> list[dict]:
        return [{"app_proto": app_proto, "dest_port": dest_port, "flows": count}
                for (app_proto, dest_port), count in sorted(self.flows.items(), key=_flow_order)]


def _alert_order(item) -> tuple:
    sid, src, dest, severity = item[0]
    return sid, src or "", dest or "", -1 if severity is None else severity


def _flow_order(item) -> tuple:
    app_proto, dest_port = item[0]
    return app_proto or "", -1 if dest_port is None else dest_port
