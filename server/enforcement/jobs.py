"""The enforcement reports' scheduled job (server/jobs/schedule.py runs it): the last day's
figures counted every hour and set as Prometheus gauges (server/metrics.py), so a scrape
reads no report."""

from __future__ import annotations

from server.db.pool import Database
from server.enforcement.config import EnforcementConfig
from server.enforcement.figures import effectiveness
from server.metrics import Metrics
from server.settings import Settings

FIGURES_CRON_SCHEDULE = "47 * * * *"


async def set_figures(db: Database, config: EnforcementConfig, metrics: Metrics) -> dict:
    counted = await effectiveness(db, config, 1)
    for figures in counted.lists:
        for name in ("packets", "bytes", "matched_routers", "matched_networks"):
            metrics.enforced.labels(figures.list, name).set(getattr(figures, name))
    for feed in counted.feeds:
        for name in ("packets", "bytes", "matched_networks", "values_never_matched"):
            metrics.feed_enforced.labels(feed.feed, name).set(getattr(feed, name))
    return {"lists": len(counted.lists), "feeds": len(counted.feeds)}


def enforcement_jobs(db: Database, settings: Settings, metrics: Metrics) -> list[tuple]:
    """(name, cron spec, function) of each job of the enforcement reports."""
    config = EnforcementConfig.from_settings(settings)
    return [("enforcement-figures", FIGURES_CRON_SCHEDULE,
             lambda: set_figures(db, config, metrics))]
