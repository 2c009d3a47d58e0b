"""The settings the enforcement reports use, taken once from `Settings`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from server.settings import Settings


@dataclass(frozen=True)
class EnforcementConfig:
    entries_per_router_day: int  # ENFORCEMENT_ENTRIES_PER_ROUTER_DAY
    intel_max_entries: int       # INTEL_MAX_ENTRIES: which threat documents a router holds
    min_router_age: timedelta    # FLEET_MIN_ROUTER_AGE_HOURS: whose reports count
    keyed: bool                  # ROUTER_AUTH=key: only keyed routers' reports count
    min_networks: int            # FLEET_MIN_NETWORKS: what matched there reorders the intel
    trims: bool                  # the intel's trimming follows the reports (key mode, or
    #                              FLEET_ATTACKERS_IN_MAC_MODE: in mac mode anyone reports)

    @classmethod
    def from_settings(cls, settings: Settings) -> EnforcementConfig:
        return cls(settings.enforcement_entries_per_router_day, settings.intel_max_entries,
                   timedelta(hours=settings.fleet_min_router_age_hours),
                   settings.router_auth == "key", settings.fleet_min_networks,
                   settings.router_auth == "key" or settings.fleet_attackers_in_mac_mode)
