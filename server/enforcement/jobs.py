"""The enforcement reports' scheduled job (server/jobs/schedule.py runs it), every hour: the
last day's figures set as Prometheus gauges (server/metrics.py), so a scrape reads no
report, and how widely each threat feed's value and each address of the fleet's list matched
in the last 30 days given to their delivery (`intel_matched`, `fleet_matched`: a document
trimmed to a router's capacity keeps those first)."""

from __future__ import annotations

from server.db.pool import Database
from server.enforcement.config import EnforcementConfig
from server.enforcement.figures import effectiveness, matched_fleet, matched_values
from server.fleet import sql as fleet_db
from server.intel import sql as intel_db
from server.metrics import Metrics
from server.settings import Settings

FIGURES_CRON_SCHEDULE = "47 * * * *"


async def set_figures(db: Database, config: EnforcementConfig, metrics: Metrics) -> dict:
    counted = await effectiveness(db, config, 1)
    for figures in counted.lists:
        for name in ("packets", "bytes", "alerts", "matched_routers", "matched_networks"):
            metrics.enforced.labels(figures.list, name).set(getattr(figures, name))
    for feed in counted.feeds:
        for name in ("packets", "bytes", "matched_networks", "values_never_matched"):
            metrics.feed_enforced.labels(feed.feed, name).set(getattr(feed, name))
    matched = await matched_values(db, config) if config.trims else []
    await intel_db.set_matched(db, matched)
    fleet_matched = await matched_fleet(db, config) if config.trims else []
    await fleet_db.set_matched(db, fleet_matched)
    return {"lists": len(counted.lists), "feeds": len(counted.feeds),
            "values_matched": len(matched), "fleet_matched": len(fleet_matched)}


def enforcement_jobs(db: Database, settings: Settings, metrics: Metrics) -> list[tuple]:
    """(name, cron spec, function) of each job of the enforcement reports."""
    config = EnforcementConfig.from_settings(settings)
    return [("enforcement-figures", FIGURES_CRON_SCHEDULE,
             lambda: set_figures(db, config, metrics))]
