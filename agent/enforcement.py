"""What this router's firewall enforced, reported to POST /rules/enforced every
enforcement_seconds (docs/router-api.md "Enforcement reports").

The block-list sets are declared with `counter` (docs/agent.md), so `nft -j list set` gives
each element's packets and bytes since it was added. The agent keeps the counts it last read
(state_dir/enforcement.json) and adds what grew since to the report pending; an element whose
count went down was added again (a reload flushes and fills a set), so its whole count is
new. The counts are read before every reload of a set and before every report, so a reload
loses nothing but what matched between that reading and the reload. A report carries each
list's totals and its MAX_ENTRIES most matched entries; once the service has taken it, the
pending counts start again from zero. While the service is unreachable they keep adding up.
A set without counters (declared before this version) reports nothing for its list.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time

from agent.client import Refused, ServiceClient
from agent.config import AgentConfig
from agent.files import write_atomically

log = logging.getLogger("router_agent.enforcement")

STATE_FILE = "enforcement.json"
MAX_ENTRIES = 100  # the service's limit on a list's entries in one report
# The service's threat intelligence rules (its docs/router-api.md): alerts of these sids are
# its intel's matches, counted with the intel list.
INTEL_FIRST_SID, INTEL_SIDS = 1_990_001, 20
COMMAND_TIMEOUT_SECONDS = 60


def intel_rule_alert(record: dict) -> bool:
    alert = record.get("alert")
    sid = alert.get("signature_id") if isinstance(alert, dict) else None
    return isinstance(sid, int) and INTEL_FIRST_SID <= sid < INTEL_FIRST_SID + INTEL_SIDS


def elements(listing: dict) -> dict[str, tuple[int, int]] | None:
    """A set's elements and their counters from `nft -j list set`; None when the set keeps
    no counters."""
    counted: dict[str, tuple[int, int]] = {}
    found = False
    for item in listing.get("nftables", []):
        for element in (item.get("set") or {}).get("elem", []):
            found = True
            inner = element.get("elem") if isinstance(element, dict) else None
            if not isinstance(inner, dict) or not isinstance(inner.get("counter"), dict):
                continue
            entry = _entry(inner.get("val"))
            if entry is not None:
                counter = inner["counter"]
                counted[entry] = (int(counter.get("packets", 0)), int(counter.get("bytes", 0)))
    return counted if counted or not found else None


def _entry(value) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("prefix"), dict):
        prefix = value["prefix"]
        return f"{prefix['addr']}/{prefix['len']}"
    return None  # a range: not an entry the service sent


class EnforcementReporter:
    def __init__(self, config: AgentConfig, client: ServiceClient):
        self._config = config
        self._client = client
        self._path = config.state_dir / STATE_FILE
        stored = json.loads(self._path.read_text()) if self._path.exists() else {}
        self._seen: dict[str, dict[str, list[int]]] = stored.get("seen", {})
        self._pending: dict[str, dict] = stored.get("pending", {})
        self._reported_at: float = stored.get("reported_at", time.time())
        self._sets = {"firewall": (config.nft_set_v4, config.nft_set_v6),
                      "fleet": (config.nft_set_fleet_v4, config.nft_set_fleet_v6),
                      "intel": (config.nft_set_intel_v4, config.nft_set_intel_v6)}
        if self.enabled and not self._path.exists():
            self._save()  # the first report's hour counts from now, across --once runs

    @property
    def enabled(self) -> bool:
        return self._config.enforcement_seconds > 0

    def due(self) -> bool:
        return self.enabled and time.time() - self._reported_at >= self._config.enforcement_seconds

    def count_alerts(self, alerts: int) -> None:
        """The intel rules' alerts read from eve.json since the last call."""
        if self.enabled and alerts:
            self._list("intel")["alerts"] = self._list("intel").get("alerts", 0) + alerts
            self._save()

    def take(self) -> None:
        """Add what every set matched since the last reading to the pending report."""
        if not self.enabled:
            return
        for name, sets in self._sets.items():
            now: dict[str, tuple[int, int]] = {}
            counted = False
            for set_name in sets:
                found = self._read(set_name)
                if found is not None:
                    counted = True
                    now.update(found)
            if counted:
                self._add(name, now)
        self._save()

    def report(self) -> None:
        """Send the pending report; kept when the service cannot be reached."""
        self.take()
        body = {"lists": {name: self._body(pending) for name, pending in self._pending.items()}}
        if body["lists"]:
            try:
                self._client.request("POST", "/rules/enforced", json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
            except Refused as error:  # it cannot succeed: dropped, not sent again and again
                log.error("enforcement report refused, dropped: %s", error)
        self._pending = {}
        self._reported_at = time.time()
        self._save()

    def _add(self, name: str, now: dict[str, tuple[int, int]]) -> None:
        seen = self._seen.get(name, {})
        pending = self._list(name)
        entries = pending.setdefault("entries", {})
        for entry, (packets, bytes_) in now.items():
            before = seen.get(entry, [0, 0])
            grown = (packets, bytes_) if packets < before[0] or bytes_ < before[1] else (
                packets - before[0], bytes_ - before[1])
            if grown[0] or grown[1]:
                total = entries.setdefault(entry, [0, 0])
                total[0] += grown[0]
                total[1] += grown[1]
        self._seen[name] = {entry: list(counts) for entry, counts in now.items()}

    def _list(self, name: str) -> dict:
        return self._pending.setdefault(name, {"entries": {}})

    @staticmethod
    def _body(pending: dict) -> dict:
        entries = sorted(pending.get("entries", {}).items(), key=lambda item: (-item[1][0],
                                                                              item[0]))
        body = {"packets": sum(counts[0] for _, counts in entries),
                "bytes": sum(counts[1] for _, counts in entries),
                "entries": [{"address": entry, "packets": packets, "bytes": bytes_}
                            for entry, (packets, bytes_) in entries[:MAX_ENTRIES]]}
        if "alerts" in pending:
            body["alerts"] = pending["alerts"]
        return body

    def _read(self, set_name: str) -> dict[str, tuple[int, int]] | None:
        command = []
        for part in self._config.counters_command:
            command += [*self._config.nft_table.split(), set_name] if part == "{set}" else [part]
        try:
            done = subprocess.run(command, capture_output=True, timeout=COMMAND_TIMEOUT_SECONDS)
            if done.returncode != 0:
                raise OSError(done.stderr.decode("utf-8", "replace").strip()[-200:])
            return elements(json.loads(done.stdout))
        except (OSError, subprocess.TimeoutExpired, ValueError, TypeError, KeyError) as error:
            log.warning("counters of set %s not read: %s", set_name, error)
            return None

    def _save(self) -> None:
        write_atomically(self._path, json.dumps({
            "seen": self._seen, "pending": self._pending,
            "reported_at": self._reported_at}).encode(), 0o600)
