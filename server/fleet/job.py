"""The fleet job: every FLEET_CRON_SCHEDULE, the fleet's attackers and outbreaks counted over
the last FLEET_WINDOW_HOURS of every router's alert summaries (server/fleet/sql.py), the
rails applied (engine/fleet.py), and both lists replaced in one transaction, which notifies
every server process: each serves the new shared document from then on (GET /rules/fleet,
server/fleet/document.py), and generation keeps the outbreaks in each IDS payload it
makes. No router's payload is regenerated for it."""

from __future__ import annotations

import time

from engine.firewall import Exemptions
from engine.fleet import fleet_attackers, fleet_outbreaks, times_written
from server.fleet import sql as fleet_db
from server.tuning import allowlist_sql
from server.db.pool import Database
from server.metrics import Metrics
from server.fleet.config import MAX_OUTBREAKS, FleetConfig

async def run_fleet(db: Database, config: FleetConfig, metrics: Metrics | None = None) -> dict:
    started = time.monotonic()
    exempt = await allowlist_sql.fleet_allowlist(db) + list(config.service_networks)
    counted = await fleet_db.count(db, config.counting(exempt), config.attackers_counted)
    # The query applied every rail before its limit; judged again here, exactly, so that no
    # difference between SQL's comparison and Python's can list an address.
    attackers = fleet_attackers([times_written(entry) for entry in counted.attackers],
                                Exemptions.of(exempt, []), config.max_entries,
                                config.window_hours)
    outbreaks = fleet_outbreaks([times_written(entry) for entry in counted.outbreaks],
                                MAX_OUTBREAKS)
    await fleet_db.replace(db, attackers, outbreaks)
    seconds = time.monotonic() - started
    if metrics is not None:
        metrics.fleet_entries.labels("attackers").set(len(attackers))
        metrics.fleet_entries.labels("outbreaks").set(len(outbreaks))
        metrics.fleet_job_seconds.set(seconds)
    return {"attackers": len(attackers), "outbreaks": len(outbreaks),
            "attackers_counted": config.attackers_counted,
            "not_listed": len(counted.attackers) - len(attackers),  # 0 unless SQL and Python differ
            "over_router_bound": sum(counted.over_bound.values()),  # summary rows not counted
            "routers_over_bound": len(counted.over_bound),
            "seconds": round(seconds, 3)}
