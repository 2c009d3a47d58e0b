"""What the agent remembers between runs, in state_dir/state.json (replaced atomically):
its place in eve.json, the spool's next number, what it applied, and counters for `status`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agent.files import write_atomically

DEFAULTS = {
    "position": None,          # {"device", "inode", "offset"} in eve.json
    "next_batch": 1,           # the spool's next sequence number
    "last_upload_at": None,    # when the server last stored (or replayed) a batch
    "last_error": None,        # {"at", "error"}: the last thing that went wrong
    "counters": {"batches_sent": 0, "records_sent": 0, "batches_replayed": 0,
                 "batches_dropped_spool_full": 0, "records_dropped_spool_full": 0,
                 "batches_refused": 0, "records_skipped": 0},
    "applied": {},             # kind -> {"etag", "updated_at", "at"}
    "failed": {},              # kind -> the ETag of a payload that failed to load
    "last_apply": None,        # {"at", "ok", "detail"}
}


class AgentState:
    def __init__(self, path: Path, values: dict):
        self.path = path
        self.values = values

    @classmethod
    def load(cls, state_dir: Path) -> "AgentState":
        path = state_dir / "state.json"
        values = json.loads(json.dumps(DEFAULTS))  # a deep copy
        if path.exists():
            stored = json.loads(path.read_text())
            values.update({key: stored[key] for key in DEFAULTS if key in stored})
            values["counters"] = {**DEFAULTS["counters"], **stored.get("counters", {})}
        return cls(path, values)

    def save(self) -> None:
        write_atomically(self.path, json.dumps(self.values, indent=1).encode(), 0o600)

    def count(self, name: str, by: int = 1) -> None:
        self.values["counters"][name] += by

    def error(self, message: str) -> None:
        self.values["last_error"] = {"at": now(), "error": message}


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
