"""What this router's firewall enforced, reported to POST /rules/enforced every
enforcement_seconds (docs/router-api.md "Enforcement reports").

The block-list sets are declared with `counter` (docs/agent.md), so `nft -j list set` gives
each element's packets and bytes since it was added (agent/nftsets.py). The agent keeps the
counts it last read (state_dir/enforcement.json) and adds what grew since to the report
pending; an element whose count went down was added again (a set filled whole), so its
whole count is new. A set is changed element by element, so what it keeps keeps its count;
the counts are read in the reading that change is made from, and before every report, so
nothing is lost but what a removed element matched between that reading and its removal
(and, where a set is filled whole, what any matched then). A report carries each
list's totals and its MAX_ENTRIES most matched entries; once the service has taken it, the
pending counts start again from zero. While the service is unreachable they keep adding up.
A set without counters (declared before this version) reports nothing for its list.

Alerts are counted as eve.json is read: those of the service's intel rules with the intel
list, the others by the source of their rule in the IDS payload last applied (its
`reason`), reported as list `ids`: every source the payload has, 0 included, and those
counted since (an alert of a rule the payload does not have is not counted).
"""

from __future__ import annotations

import json
import logging
import time

from agent.client import Refused, ServiceClient
from agent.config import AgentConfig
from agent.files import write_atomically
from agent.nftsets import Counts, read_set

log = logging.getLogger("router_agent.enforcement")

STATE_FILE = "enforcement.json"
MAX_ENTRIES = 100  # the service's limit on a list's entries in one report
# The service's threat intelligence rules (its docs/router-api.md): alerts of these sids are
# its intel's matches, counted with the intel list.
INTEL_FIRST_SID, INTEL_SIDS = 1_990_001, 20


IDS = "ids"  # the report's list of the IDS rules' alerts by source

RuleKey = str  # "GID:SID"


def alerted_rule(record: dict) -> RuleKey | None:
    """The rule an alert record names."""
    alert = record.get("alert")
    if not isinstance(alert, dict):
        return None
    gid, sid = alert.get("gid", 1), alert.get("signature_id")
    return f"{gid}:{sid}" if isinstance(gid, int) and isinstance(sid, int) else None


def _intel_rule(rule: RuleKey) -> bool:
    gid, sid = map(int, rule.split(":"))
    return gid == 1 and INTEL_FIRST_SID <= sid < INTEL_FIRST_SID + INTEL_SIDS


class EnforcementReporter:
    def __init__(self, config: AgentConfig, client: ServiceClient):
        self._config = config
        self._client = client
        self._path = config.state_dir / STATE_FILE
        stored = json.loads(self._path.read_text()) if self._path.exists() else {}
        self._seen: dict[str, dict[str, list[int]]] = stored.get("seen", {})
        self._pending: dict[str, dict] = stored.get("pending", {})
        self._reported_at: float = stored.get("reported_at", time.time())
        self._sources: dict[RuleKey, str] = stored.get("sources", {})  # of the IDS payload
        self.sets = {"firewall": (config.nft_set_v4, config.nft_set_v6),
                      "fleet": (config.nft_set_fleet_v4, config.nft_set_fleet_v6),
                      "intel": (config.nft_set_intel_v4, config.nft_set_intel_v6)}
        if self.enabled and not self._path.exists():
            self._save()  # the first report's hour counts from now, across --once runs

    @property
    def enabled(self) -> bool:
        return self._config.enforcement_seconds > 0

    def due(self) -> bool:
        return self.enabled and time.time() - self._reported_at >= self._config.enforcement_seconds

    def rule_sources(self, rules: list[dict]) -> None:
        """The IDS payload just applied: the source (`reason`) of each of its rules."""
        self._sources = {f"{rule.get('gid', 1)}:{rule.get('sid')}": rule["reason"]
                         for rule in rules if isinstance(rule.get("reason"), str)}
        self._save()

    def count_alerts(self, alerted: dict[RuleKey, int]) -> None:
        """The alerts of each rule read from eve.json since the last call."""
        if not self.enabled or not alerted:
            return
        for rule, alerts in alerted.items():
            if _intel_rule(rule):
                self._list("intel")["alerts"] = self._list("intel").get("alerts", 0) + alerts
            elif (source := self._sources.get(rule)) is not None:
                by_source = self._pending.setdefault(IDS, {})
                by_source[source] = by_source.get(source, 0) + alerts
        self._save()

    def take(self) -> None:
        """Add what every set matched since the last reading to the pending report."""
        if not self.enabled:
            return
        for name, sets in self.sets.items():
            held = [found for found in map(lambda set_name: read_set(self._config, set_name),
                                           sets) if found is not None]
            self._add(name, held)
        self._save()

    def counted(self, name: str, held: list[dict[str, Counts]]) -> None:
        """Add what the sets of list `name` matched, from a reading made by the caller."""
        if self.enabled:
            self._add(name, held)
            self._save()

    def report(self) -> None:
        """Send the pending report; kept when the service cannot be reached."""
        self.take()
        body = self.pending()
        if body["lists"]:
            try:
                self._client.request("POST", "/rules/enforced", json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
            except Refused as error:  # it cannot succeed: dropped, not sent again and again
                log.error("enforcement report refused, dropped: %s", error)
        self._pending = {}
        self._reported_at = time.time()
        self._save()

    def pending(self) -> dict:
        """The report as it would be sent now (POST /rules/enforced's body)."""
        lists = {name: self._body(pending) for name, pending in self._pending.items()
                 if name != IDS}
        if by_source := {**dict.fromkeys(sorted(set(self._sources.values())), 0),
                         **self._pending.get(IDS, {})}:
            lists[IDS] = by_source
        return {"lists": lists}

    def _add(self, name: str, held: list[dict[str, Counts]]) -> None:
        if not held:
            return  # its sets cannot be read
        now = {entry: counts for found in held for entry, counts in found.items()
               if counts is not None}
        if not now and any(held):
            return  # its sets keep no counters
        seen = self._seen.get(name, {})
        entries = self._list(name).setdefault("entries", {})
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

    def _save(self) -> None:
        write_atomically(self._path, json.dumps({
            "seen": self._seen, "pending": self._pending,
            "reported_at": self._reported_at, "sources": self._sources}).encode(), 0o600)
