"""Why the fleet's list holds what it holds: every address reported in the window with the
first rule that kept it out, or listed; the story of one address (`router-backend fleet
attackers`, `--why ADDR`). The rules are the job's (server/fleet/sql.py), in its order, and each address's
networks are counted by the job's own statement."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from engine.addresses import is_public
from engine.firewall import Exemptions
from server.fleet import sql as fleet_db
from server.tuning import allowlist_sql
from server.db.pool import Database
from server.fleet.config import FleetConfig

BELOW = "below the networks threshold"
RULES = ("listed", "not public", "on the allowlist or the service's own",
         "a router's poll address", "no router that may count (too young, no key, or "
         "summarised before the upgrade)", "below the networks threshold",
         "enough networks, not listed at the job's last run (reported since, or past "
         "FLEET_MAX_ENTRIES)", "the attackers list is off (mac mode)")


@dataclass
class Story:
    address: str
    routers: list[tuple[str, str | None, bool]] = field(default_factory=list)
    networks: int = 0
    verdict: str = ""


async def stories(db: Database, config: FleetConfig, address: str | None = None
                  ) -> list[Story]:
    counted = config.counting(await allowlist_sql.fleet_allowlist(db)
                              + list(config.service_networks))
    by_address: dict[str, Story] = {}
    for reported, mac, network, may_count in await fleet_db.reports(db, counted, address):
        story = by_address.setdefault(reported, Story(reported))
        story.routers.append((mac, network, may_count))
    polled = await fleet_db.polled_addresses(db, list(by_address))
    listed = {entry["address"] for entry in await fleet_db.attackers(db)}
    exemptions = Exemptions.of(list(counted.exempt), [])
    counted_networks = await fleet_db.networks_counted(db, [
        (story.address, mac, network) for story in by_address.values()
        for mac, network, may_count in story.routers if may_count and network is not None])
    for story in by_address.values():
        story.networks = counted_networks.get(story.address, 0)
        story.verdict = _verdict(story, config, listed, polled, exemptions)
    return sorted(by_address.values(), key=lambda s: (-s.networks, s.address))


def _verdict(story: Story, config: FleetConfig, listed: set[str], polled: set[str],
             exemptions: Exemptions) -> str:
    if story.address in listed:
        return RULES[0]
    if not is_public(story.address):
        return RULES[1]
    if exemptions.exempt(story.address):
        return RULES[2]
    if story.address in polled:
        return RULES[3]
    if not config.attackers_counted:
        return RULES[7]
    if not any(may and network for _, network, may in story.routers):
        return RULES[4]
    if story.networks < config.min_networks:
        return RULES[5]
    return RULES[6]


def summary_line(found: list[Story], config: FleetConfig) -> str:
    verdicts = Counter(story.verdict for story in found)
    threshold = f" (FLEET_MIN_NETWORKS is {config.min_networks})"
    kept_out = "; ".join(f"{verdicts[rule]} {rule}{threshold if rule == BELOW else ''}"
                         for rule in RULES[1:] if verdicts[rule])
    return (f"{len(found)} address(es) reported in the last {config.window_hours} h: "
            f"{verdicts[RULES[0]]} listed" + (f"; kept out: {kept_out}" if kept_out else ""))


def story_lines(story: Story, config: FleetConfig) -> list[str]:
    lines = [f"{story.address}: {story.verdict}; {story.networks} network(s) counted of "
             f"{config.min_networks} needed, {len(story.routers)} report(s)"]
    for mac, network, may_count in story.routers[:50]:
        why = ("counts" if may_count and network else
               "does not count: no upload network (summarised before the upgrade)"
               if may_count else "does not count: too young, or no key in key mode")
        lines.append(f"  {mac} from {network or '-'}: {why}")
    return lines
