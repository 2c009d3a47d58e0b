"""The fleet job: every FLEET_CRON_SCHEDULE, the fleet's attackers and outbreaks counted over
the last FLEET_WINDOW_HOURS of every router's alert summaries (server/fleet/sql.py), the
rails applied (engine/fleet.py), and both lists replaced in one transaction, which notifies
every server process: each serves the new shared document from then on (GET /rules/fleet,
server/fleet/document.py), and generation keeps the outbreaks in each IDS payload it
makes. No router's payload is regenerated for it."""

from __future__ import annotations

import time
from datetime import timedelta

from engine.addresses import canonical, canonical_network
from engine.firewall import Exemptions
from engine.fleet import fleet_attackers, fleet_outbreaks, times_written
from server.fleet import sql as fleet_db
from server.tuning import allowlist_sql
from server.db.pool import Database
from server.metrics import Metrics
from server.settings import Settings

MAX_OUTBREAKS = 1_000  # generation takes at most RULE_GENERATION_FLEET_PERCENT of a payload


def counting(settings: Settings, exempt: list[str]) -> fleet_db.Counting:
    return fleet_db.Counting(window=timedelta(hours=settings.fleet_window_hours),
                             severity=settings.rule_generation_block_severity,
                             min_networks=settings.fleet_min_networks,
                             min_age=timedelta(hours=settings.fleet_min_router_age_hours),
                             keyed=settings.router_auth == "key",
                             max_addresses=settings.fleet_max_entries,
                             max_signatures=MAX_OUTBREAKS,
                             per_router=settings.fleet_max_per_router,
                             exempt=tuple(str(canonical_network(n)) for n in exempt))


def attackers_on(settings: Settings) -> bool:
    """In mac mode anyone may upload as any router: no attackers list unless chosen."""
    return settings.router_auth == "key" or settings.fleet_attackers_in_mac_mode


def service_networks(settings: Settings) -> list[str]:
    """The service's own addresses, never listed: SERVICE_ADDRESSES, TRUSTED_PROXIES, and the
    listeners' hosts when they are addresses."""
    networks = [str(network) for network in settings.service_addresses | settings.trusted_proxies]
    hosts = [settings.listen_host] + ([settings.console_listen[0]]
                                      if settings.console_listen else [])
    for host in hosts:
        try:
            networks.append(str(canonical(host.strip("[]"))))
        except ValueError:
            pass  # a name, or every address (0.0.0.0): nothing to keep out
    return networks


async def run_fleet(db: Database, settings: Settings, metrics: Metrics | None = None) -> dict:
    started = time.monotonic()
    exempt = await allowlist_sql.fleet_allowlist(db) + service_networks(settings)
    counted = await fleet_db.count(db, counting(settings, exempt), attackers_on(settings))
    # The query applied every rail before its limit; judged again here, exactly, so that no
    # difference between SQL's comparison and Python's can list an address.
    attackers = fleet_attackers([times_written(entry) for entry in counted.attackers],
                                Exemptions.of(exempt, []), settings.fleet_max_entries,
                                settings.fleet_window_hours)
    outbreaks = fleet_outbreaks([times_written(entry) for entry in counted.outbreaks],
                                MAX_OUTBREAKS)
    await fleet_db.replace(db, attackers, outbreaks)
    seconds = time.monotonic() - started
    if metrics is not None:
        metrics.fleet_entries.labels("attackers").set(len(attackers))
        metrics.fleet_entries.labels("outbreaks").set(len(outbreaks))
        metrics.fleet_job_seconds.set(seconds)
    return {"attackers": len(attackers), "outbreaks": len(outbreaks),
            "attackers_counted": attackers_on(settings),
            "not_listed": len(counted.attackers) - len(attackers),  # 0 unless SQL and Python differ
            "over_router_bound": sum(counted.over_bound.values()),  # summary rows not counted
            "routers_over_bound": len(counted.over_bound),
            "seconds": round(seconds, 3)}
