"""The settings the owners' marks use, taken once from `Settings`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from server.settings import Settings


@dataclass(frozen=True)
class FeedbackConfig:
    networks: int              # FALSE_POSITIVE_NETWORKS: marks of this many networks hold
    per_router_day: int        # FALSE_POSITIVE_MARKS_PER_ROUTER_DAY
    min_router_age: timedelta  # FLEET_MIN_ROUTER_AGE_HOURS: whose marks count for the fleet
    keyed: bool                # ROUTER_AUTH=key: only keyed routers' marks count

    @classmethod
    def from_settings(cls, settings: Settings) -> FeedbackConfig:
        return cls(settings.false_positive_networks,
                   settings.false_positive_marks_per_router_day,
                   timedelta(hours=settings.fleet_min_router_age_hours),
                   settings.router_auth == "key")
