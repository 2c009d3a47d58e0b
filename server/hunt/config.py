"""The settings the hunt capability uses, taken once from `Settings`: what routers may add to
the index (server/hunt/budget.py), its lanes, and how long the records a match points to are
kept."""

from __future__ import annotations

from dataclasses import dataclass

from server.hunt.budget import HuntBudget
from server.settings import Settings


@dataclass(frozen=True)
class HuntConfig:
    budget: HuntBudget             # HUNT_POSTINGS_PER_ROUTER_DAY, and who shares one
    lanes: int                     # HUNT_INDEX_LANES
    records_kept_days: int | None  # RETENTION_DAYS while the retention job runs, else None

    @classmethod
    def from_settings(cls, settings: Settings) -> HuntConfig:
        return cls(HuntBudget.from_settings(settings), settings.hunt_index_lanes,
                   records_kept_days(settings))


def records_kept_days(settings: Settings) -> int | None:
    """How long records are kept: RETENTION_DAYS while the retention job runs, else None
    (nothing is deleted, DATA_RETENTION_ENABLED=false)."""
    return settings.retention_days if settings.data_retention_enabled else None
