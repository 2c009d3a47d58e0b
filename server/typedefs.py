"""Typed keys of the application state (one place, so every handler reaches the same objects)."""

from aiohttp import web

from server.db.pool import Database
from server.polling.etag_cache import EtagCache
from server.fleet.document import FleetLists
from server.intel.document import IntelLists
from server.generation.declarations import Declarations
from server.generation.service import GenerationService
from server.routers.identity import RouterRegistry
from server.ingest.ingest import Ingestion
from server.ingest.slots import UploadSlots
from server.ingest.tally import TrafficTally
from server.web.limits import FloodLimits
from server.metrics import Metrics
from server.notify.sends import Sends
from server.routers.keys import RouterKeys
from server.notify.service import Notifier
from server.settings import Settings
from server.web.in_flight import InFlight

SETTINGS = web.AppKey("settings", Settings)
DATABASE = web.AppKey("database", Database)
INGESTION = web.AppKey("ingestion", Ingestion)
UPLOAD_SLOTS = web.AppKey("upload_slots", UploadSlots)
ROUTER_REGISTRY = web.AppKey("router_registry", RouterRegistry)
DECLARATIONS = web.AppKey("declarations", Declarations)
ROUTER_KEYS = web.AppKey("router_keys", RouterKeys)
FLOOD_LIMITS = web.AppKey("flood_limits", FloodLimits)
TRAFFIC_TALLY = web.AppKey("traffic_tally", TrafficTally)
GENERATION = web.AppKey("generation", GenerationService)
NOTIFIER = web.AppKey("notifier", Notifier)
SENDS = web.AppKey("sends", Sends)
METRICS = web.AppKey("metrics", Metrics)
IN_FLIGHT = web.AppKey("in_flight", InFlight)
ETAG_CACHE = web.AppKey("etag_cache", EtagCache)
FLEET_LIST = web.AppKey("fleet_list", FleetLists)
INTEL_LIST = web.AppKey("intel_list", IntelLists)
# What this process does: its parts (server/app.py Part, SERVING, WORKING).
PARTS = web.AppKey("parts", tuple)
