"""The fleet job: every FLEET_CRON_SCHEDULE, the fleet's attackers and outbreaks counted over
the last FLEET_WINDOW_HOURS of every router's alert summaries (server/db/fleet.py), the
rails applied (engine/fleet.py), and both lists replaced in one transaction, which notifies
every server process: each serves the new shared document from then on (GET /rules/fleet,
server/polling/fleet_list.py), and generation keeps the outbreaks in each IDS payload it
makes. No router's payload is regenerated for it."""

from __future__ import annotations

import ipaddress
import time
from datetime import timedelta

from engine.firewall import Exemptions
from engine.fleet import fleet_attackers, fleet_outbreaks
from server.db import fleet as fleet_db
from server.db.pool import Database
from server.metrics import Metrics
from server.settings import Settings

MAX_OUTBREAKS = 1_000  # generation takes at most RULE_GENERATION_FLEET_PERCENT of a payload
# Addresses counted beyond FLEET_MAX_ENTRIES, for those the rails then drop (a router's poll
# address, one is_external judges not global after the query's first cut).
RAILS_SLACK = 100


def counting(settings: Settings, exempt: list[str]) -> fleet_db.Counting:
    return fleet_db.Counting(window=timedelta(hours=settings.fleet_window_hours),
                             severity=settings.rule_generation_block_severity,
                             min_networks=settings.fleet_min_networks,
                             min_age=timedelta(hours=settings.fleet_min_router_age_hours),
                             keyed=settings.router_auth == "key",
                             max_addresses=settings.fleet_max_entries + RAILS_SLACK,
                             max_signatures=MAX_OUTBREAKS, exempt=tuple(exempt))


def service_networks(settings: Settings) -> list[str]:
    """The service's own addresses, never listed: SERVICE_ADDRESSES, TRUSTED_PROXIES, and the
    listeners' hosts when they are addresses."""
    networks = [str(network) for network in settings.service_addresses | settings.trusted_proxies]
    hosts = [settings.listen_host] + ([settings.console_listen[0]]
                                      if settings.console_listen else [])
    for host in hosts:
        try:
            networks.append(str(ipaddress.ip_address(host)))
        except ValueError:
            pass  # a name, or every address (0.0.0.0): nothing to keep out
    return networks


async def run_fleet(db: Database, settings: Settings, metrics: Metrics | None = None) -> dict:
    started = time.monotonic()
    exempt = await fleet_db.fleet_allowlist(db) + service_networks(settings)
    found, outbreaks_found = await fleet_db.count(db, counting(settings, exempt))
    polled = await fleet_db.polled_from(db, [entry["address"] for entry in found])
    exemptions = Exemptions.of(exempt, polled)
    attackers = fleet_attackers(found, exemptions, settings.fleet_max_entries,
                                settings.fleet_window_hours)
    outbreaks = fleet_outbreaks(outbreaks_found, MAX_OUTBREAKS)
    await fleet_db.replace(db, attackers, outbreaks)
    seconds = time.monotonic() - started
    if metrics is not None:
        metrics.fleet_entries.labels("attackers").set(len(attackers))
        metrics.fleet_entries.labels("outbreaks").set(len(outbreaks))
        metrics.fleet_job_seconds.set(seconds)
    return {"attackers": len(attackers), "outbreaks": len(outbreaks),
            "addresses_counted": len(found),  # at the threshold, FLEET_MAX_ENTRIES + slack
            "not_listed": len(found) - len(attackers),  # the rails, or FLEET_MAX_ENTRIES
            "seconds": round(seconds, 3)}
