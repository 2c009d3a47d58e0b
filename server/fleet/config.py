"""The settings the fleet capability uses, taken once from `Settings` (FLEET_*, the block
severity, the router mode, and the service's own addresses, which are never listed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from engine.addresses import canonical, canonical_network
from server.fleet.sql import Counting
from server.settings import Settings

MAX_OUTBREAKS = 1_000  # generation takes at most RULE_GENERATION_FLEET_PERCENT of a payload


@dataclass(frozen=True)
class FleetConfig:
    window_hours: int          # FLEET_WINDOW_HOURS
    severity: int              # RULE_GENERATION_BLOCK_SEVERITY: alerts this severe or more count
    min_networks: int          # FLEET_MIN_NETWORKS
    min_age: timedelta         # FLEET_MIN_ROUTER_AGE_HOURS
    keyed: bool                # ROUTER_AUTH=key: only keyed routers count
    max_entries: int           # FLEET_MAX_ENTRIES
    per_router: int            # FLEET_MAX_PER_ROUTER
    attackers_counted: bool    # in mac mode anyone may upload as any router: off unless chosen
    service_networks: tuple[str, ...]  # the service's own addresses, never listed

    @classmethod
    def from_settings(cls, settings: Settings) -> FleetConfig:
        keyed = settings.router_auth == "key"
        return cls(settings.fleet_window_hours, settings.rule_generation_block_severity,
                   settings.fleet_min_networks,
                   timedelta(hours=settings.fleet_min_router_age_hours), keyed,
                   settings.fleet_max_entries, settings.fleet_max_per_router,
                   keyed or settings.fleet_attackers_in_mac_mode, service_networks(settings))

    def counting(self, exempt: list[str]) -> Counting:
        return Counting(window=timedelta(hours=self.window_hours), severity=self.severity,
                        min_networks=self.min_networks, min_age=self.min_age,
                        keyed=self.keyed, max_addresses=self.max_entries,
                        max_signatures=MAX_OUTBREAKS, per_router=self.per_router,
                        exempt=tuple(str(canonical_network(n)) for n in exempt))


def service_networks(settings: Settings) -> tuple[str, ...]:
    """SERVICE_ADDRESSES, TRUSTED_PROXIES, and the listeners' hosts when they are addresses."""
    networks = [str(network) for network in settings.service_addresses | settings.trusted_proxies]
    hosts = [settings.listen_host] + ([settings.console_listen[0]]
                                      if settings.console_listen else [])
    for host in hosts:
        try:
            networks.append(str(canonical(host.strip("[]"))))
        except ValueError:
            pass  # a name, or every address (0.0.0.0): nothing to keep out
    return tuple(networks)
