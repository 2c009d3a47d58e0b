"""eve.json to the service, exactly once: new lines are split into alerts (POST /log/events)
and flows (POST /log/cfm), spooled as batches, and the position in eve.json is saved only
after; batches are then sent oldest first, each with its Idempotency-Key, and removed once
the server answered for them (stored, or replayed: stored by an earlier try).

A crash anywhere repeats at most a step whose effect the key makes harmless: lines read
again give the same key; a batch sent again is replayed by the server.
"""

from __future__ import annotations

import json
import logging
from collections import Counter

from agent.client import Refused, ServiceClient
from agent.config import AgentConfig
from agent.enforcement import EnforcementReporter, RuleKey, alerted_rule
from agent.spool import Batch, Spool
from agent.state import AgentState, now
from agent.tail import EveTail

log = logging.getLogger("router_agent.uploads")

PATHS = {"events": "/log/events", "cfm": "/log/cfm"}
STOP_SENDING = {401, 403}  # the router's key or subscription: no batch can pass until fixed


class Uploader:
    def __init__(self, config: AgentConfig, state: AgentState, client: ServiceClient,
                 enforcement: EnforcementReporter):
        self._config = config
        self._enforcement = enforcement
        self._state = state
        self._client = client
        self.spool = Spool(config.state_dir / "spool", config.spool_max_bytes)
        self.tail = EveTail(config.eve_json, state.values["position"], config.batch_records,
                            config.batch_bytes, self._save_position)

    def collect(self) -> int:
        """Move what is new in eve.json to the spool; the number of batches spooled."""
        spooled = 0
        while chunk := self.tail.read():
            kinds, skipped, alerted = self._split(chunk.lines)
            for kind, lines in kinds.items():
                if lines:
                    self.spool.add(self._state.values["next_batch"], kind, chunk.key, lines)
                    self._state.values["next_batch"] += 1
                    spooled += 1
            self._state.count("records_skipped", skipped)
            self._enforcement.count_alerts(alerted)
            self.tail.advance(chunk.position)
            for dropped in self.spool.drop_oldest_beyond_cap():
                self._state.count("batches_dropped_spool_full")
                self._state.count("records_dropped_spool_full", dropped.records)
            self._save_position(chunk.position)
        return spooled

    def send(self, max_batches: int) -> bool:
        """Send up to `max_batches` of the spool, oldest first; whether more are waiting.
        Unavailable (from the client) stops at the first batch that cannot be sent now."""
        batches = self.spool.batches()
        for batch in batches[:max_batches]:
            try:
                self._send(batch)
            except Refused as error:
                if error.status in STOP_SENDING:
                    raise
                log.error("batch %s (%d records) refused by the server (%s): it cannot "
                          "succeed, dropped", batch.path.name, batch.records, error)
                self._state.count("batches_refused")
                self._state.error(f"batch refused: {error}")
            self.spool.remove(batch)
            self._state.save()
        return len(batches) > max_batches

    def _send(self, batch: Batch) -> None:
        answer = self._client.request("POST", PATHS[batch.kind], batch.body(), headers={
            "Content-Type": "application/x-ndjson", "Content-Encoding": "gzip",
            "Idempotency-Key": batch.key})
        report = answer.json()
        if answer.headers.get("idempotent-replayed") == "true":
            self._state.count("batches_replayed")
        else:
            self._state.count("batches_sent")
            self._state.count("records_sent", report.get("accepted", 0))
        if report.get("rejected"):
            log.warning("batch %s: the server rejected %d of its records: %s",
                        batch.path.name, report["rejected"], report.get("errors", [])[:3])
        self._state.values["last_upload_at"] = now()

    def _split(self, lines: list[bytes]) -> tuple[dict[str, list[bytes]], int, Counter]:
        """The lines by where they go, those skipped, and the alerts of each rule."""
        kinds: dict[str, list[bytes]] = {"events": [], "cfm": []}
        skipped, alerted = 0, Counter()
        for line in lines:
            kind, rule = self._kind_of(line)
            if rule is not None:
                alerted[rule] += 1
            if kind is None:
                skipped += 1
            else:
                kinds[kind].append(line)
        return kinds, skipped, alerted

    def _kind_of(self, line: bytes) -> tuple[str | None, RuleKey | None]:
        try:
            record = json.loads(line)
            event_type = record.get("event_type")
        except (ValueError, AttributeError):
            return None, None  # not a JSON object: the server would reject it too
        if event_type in self._config.alert_types:
            return "events", alerted_rule(record)
        if event_type in self._config.flow_types or event_type in self._config.meta_types:
            return "cfm", None
        return None, None

    def _save_position(self, position: dict) -> None:
        self._state.values["position"] = position
        self._state.save()
