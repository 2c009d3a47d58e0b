"""What a drill found wrong: each check against the truth it planted, the first 20 failures
kept (bench/report_drill.py, bench/enforcement_week.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

KEPT = 20


@dataclass
class Checks:
    failures: list = field(default_factory=list)

    def check(self, condition: bool, what: str) -> None:
        if not condition and len(self.failures) < KEPT:
            self.failures.append(what)

    @property
    def ok(self) -> bool:
        return not self.failures
