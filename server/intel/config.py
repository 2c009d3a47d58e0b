"""The settings the intel capability uses, taken once from `Settings` (INTEL_*, and the
hunt's and the fleet's that its retro-hunt and its rails share)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from server.fleet.config import service_networks
from server.hunt.config import HuntConfig
from server.settings import Settings


@dataclass(frozen=True)
class IntelConfig:
    feed_max_bytes: int          # INTEL_FEED_MAX_BYTES, a feed's decoded bytes, events and all
    fetch_timeout_seconds: int   # INTEL_FETCH_TIMEOUT_SECONDS
    prevalence_max: float        # INTEL_PREVALENCE_MAX, of the fleet's routers
    retro_hunt_processes: int    # INTEL_RETRO_HUNT_PROCESSES
    retention_days: int          # HUNT_RETENTION_DAYS, the retro-hunt's window
    hunt: HuntConfig             # the hunt's (HUNT_*), for the indexing it waits on
    min_router_age: timedelta    # FLEET_MIN_ROUTER_AGE_HOURS: who counts for prevalence
    keyed: bool                  # ROUTER_AUTH=key: only keyed routers count
    service_networks: tuple[str, ...]  # never delivered nor sighted (the fleet's own rail)

    @classmethod
    def from_settings(cls, settings: Settings) -> IntelConfig:
        return cls(settings.intel_feed_max_bytes, settings.intel_fetch_timeout_seconds,
                   settings.intel_prevalence_max, settings.intel_retro_hunt_processes,
                   settings.hunt_retention_days, HuntConfig.from_settings(settings),
                   timedelta(hours=settings.fleet_min_router_age_hours),
                   settings.router_auth == "key", service_networks(settings))
