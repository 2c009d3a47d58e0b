"""The intel jobs, scheduled by every server process (server/app.py) beside the others:
`intel-fetch` (INTEL_FETCH_CRON_SCHEDULE) takes each URL feed's new version, retro-hunts what
it brings, closes every sighting of a withheld value and tells owners; `intel-match`
(INTEL_MATCH_CRON_SCHEDULE) retro-hunts what an import brought, matches the last two days of
the index against every current indicator, closes the untold sightings of withheld values,
and tells owners."""

from __future__ import annotations

from server.intel import sql as intel_db
from server.intel.config import IntelConfig
from server.db.pool import Database
from server.intel.feeds import fetch_feed
from server.intel.owners import tell_owners
from server.intel.retro import live_match, retro_hunt
from server.settings import Settings

ACTOR = "job:{name}"


async def fetch_feeds(db: Database, config: IntelConfig, name: str | None = None,
                      actor: str = ACTOR.format(name="intel-fetch")) -> dict:
    """Every feed with a URL (or the one named), then what a new version needs."""
    lines = [(await fetch_feed(db, feed, config, actor)).line()
             for feed in await intel_db.feeds(db, name) if feed.url]
    return {"feeds": lines, **await judge_and_tell(db, config, actor)}


async def judge_and_tell(db: Database, config: IntelConfig, actor: str) -> dict:
    """After a version is taken (fetched or imported): its values retro-hunted (held, or
    sighted, and delivered from then on), every open sighting of a withheld value closed,
    and the owners told."""
    hunted = await retro_hunt(db, config, actor)
    closed = await intel_db.close_withheld(db, list(config.service_networks), untold_only=False)
    told = await tell_owners(db)
    return {"retro_hunt": vars(hunted), "closed": closed, **told}


async def match_now(db: Database, config: IntelConfig,
                    actor: str = ACTOR.format(name="intel-match")) -> dict:
    hunted = await retro_hunt(db, config, actor)
    live = await live_match(db, config, actor)
    closed = await intel_db.close_withheld(db, list(config.service_networks), untold_only=True)
    told = await tell_owners(db)
    return {"retro_hunt": vars(hunted), "live": vars(live), "closed": closed, **told}


def intel_jobs(db: Database, settings: Settings) -> list[tuple]:
    """(name, cron spec, function) of each intel job."""
    config = IntelConfig.from_settings(settings)
    return [("intel-fetch", settings.intel_fetch_cron_schedule,
             lambda: fetch_feeds(db, config)),
            ("intel-match", settings.intel_match_cron_schedule,
             lambda: match_now(db, config))]
