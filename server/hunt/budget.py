"""What the hunt indexer lets routers add to the index in a day (HUNT_POSTINGS_PER_ROUTER_DAY),
and who shares a budget: a router that does not count for the fleet yet (registered less
than FLEET_MIN_ROUTER_AGE_HOURS ago, or holding a key issued since; in key mode, one without a
key) shares one day's budget with every such router of the network its upload came from (the
/48s of one IPv6 /32 share PER_ALLOCATION budgets), as the fleet counts networks, not MACs. So 2,000 fresh MACs from one address add to the index
what one router may, and an established router's budget is its own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from server.settings import Settings


@dataclass(frozen=True)
class HuntBudget:
    per_router_day: int                        # new postings a day: a router's, or a network's
    fresh_age: timedelta = timedelta(0)        # younger routers share their network's budget
    keyed: bool = False                        # ROUTER_AUTH=key: a router without a key shares

    @classmethod
    def from_settings(cls, settings: Settings) -> HuntBudget:
        return cls(settings.hunt_postings_per_router_day,
                   timedelta(hours=settings.fleet_min_router_age_hours),
                   settings.router_auth == "key")

    @property
    def shared(self) -> bool:
        """Whether any router can be fresh (with neither an age nor keys, none is)."""
        return self.keyed or self.fresh_age > timedelta(0)
